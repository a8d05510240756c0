//! The Nexmark queries with brook's builder API, each a function from the stream of
//! [`Event`](crate::Event)s to the query's result stream, as the reference queries
//! (the nexmark/nexmark project's SQL, which Flink, RisingWave and Arroyo publish
//! figures for) define them. One query per file.
//!
//! | query | what | result |
//! |---|---|---|
//! | [`q0`] | pass-through: every bid | [`Bid`](crate::Bid) |
//! | [`q1`] | currency conversion: every bid's price × 0.908 (dollars to euros) | [`EuroBid`] |
//! | [`q2`] | selection: the bids on auctions whose id is a multiple of 123 | [`AuctionPrice`] |
//! | [`q3`] | local item suggestion: auctions of category 10 joined to their sellers from OR, ID or CA | [`LocalItem`] |
//! | [`q4`] | average price for a category: per category, the average closing price of its auctions, updated as each closes | [`CategoryAverage`] |
//! | [`q5`] | hot items: per hopping window (10 s, sliding by 2 s) the auctions with the most bids | [`HotItem`] |
//! | [`q7`] | highest bid: per 10 s tumbling window the bids with the highest price | [`Bid`](crate::Bid) |
//! | [`q8`] | new users: the persons who registered and opened an auction in the same 10 s window | [`NewUser`] |
//! | [`q11`] | user sessions: each bidder's bids per session (ended by 10 s without a bid) | [`BidderSession`] |
//! | [`q12`] | processing-time windows: each bidder's bids per 10 s of processing time | [`BidderCount`] |

mod q0;
mod q1;
mod q11;
mod q12;
mod q2;
mod q3;
mod q4;
mod q5;
mod q7;
mod q8;

pub use q0::q0;
pub use q1::{q1, EuroBid, DOLLAR_TO_EURO};
pub use q11::{q11, BidderSession, Q11_GAP_MS};
pub use q12::{q12, q12_windows, BidderCount, Q12_SIZE_MS};
pub use q2::{q2, AuctionPrice, Q2_AUCTION_MODULUS};
pub use q3::{q3, LocalItem, Q3_CATEGORY, Q3_STATES};
pub use q4::{q4, CategoryAverage};
pub use q5::{q5, HotItem, Q5_SIZE_MS, Q5_SLIDE_MS};
pub use q7::{q7, Q7_SIZE_MS};
pub use q8::{q8, NewUser, Q8_SIZE_MS};
