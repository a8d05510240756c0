//! The records of the online auction: [`Person`]s, [`Auction`]s and [`Bid`]s, and the
//! [`Event`] that is one of them. Field names and meanings are the reference's (the
//! nexmark/nexmark project's and Beam's model); times are ms since the epoch, money in
//! cents.

use std::borrow::Cow;

use brook_core::time::Millis;
use serde::{Deserialize, Serialize};

/// A person registering to sell or bid.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Person {
    /// The person's id (from 1000 on, in order of registration).
    pub id: u64,
    /// First and last name.
    pub name: String,
    /// An e-mail address made of the name.
    pub email_address: String,
    /// Sixteen digits in groups of four.
    pub credit_card: String,
    /// One of a few US cities.
    pub city: Cow<'static, str>,
    /// The city's state, two letters.
    pub state: Cow<'static, str>,
    /// When the person registered (the event time, ms).
    pub date_time: Millis,
    /// Padding (empty: the generator has no padding setting yet).
    pub extra: String,
}

/// An item put up for auction.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Auction {
    /// The auction's id (from 1000 on, in order of opening).
    pub id: u64,
    /// The item's name.
    pub item_name: Cow<'static, str>,
    /// The item's description.
    pub description: Cow<'static, str>,
    /// The starting price (cents).
    pub initial_bid: u64,
    /// The price under which the item is not sold (cents, above `initial_bid`).
    pub reserve: u64,
    /// When the auction opened (the event time, ms).
    pub date_time: Millis,
    /// When the auction closes (ms, after `date_time`).
    pub expires: Millis,
    /// The seller's person id.
    pub seller: u64,
    /// The item's category, `10..15`.
    pub category: u64,
    /// Padding (empty).
    pub extra: String,
}

/// A bid on an auction.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Bid {
    /// The auction's id.
    pub auction: u64,
    /// The bidder's person id.
    pub bidder: u64,
    /// The bid (cents, in dollars: q1 converts it).
    pub price: u64,
    /// Where the bid came from.
    pub channel: Cow<'static, str>,
    /// The page the bid was made on.
    pub url: Cow<'static, str>,
    /// When the bid was made (the event time, ms).
    pub date_time: Millis,
    /// Padding (empty).
    pub extra: String,
}

/// One event of the generator: a new person, a new auction or a bid.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// A person registered.
    Person(Person),
    /// An auction opened.
    Auction(Auction),
    /// A bid was made.
    Bid(Bid),
}

impl Event {
    /// The event time (ms).
    pub fn date_time(&self) -> Millis {
        match self {
            Event::Person(p) => p.date_time,
            Event::Auction(a) => a.date_time,
            Event::Bid(b) => b.date_time,
        }
    }

    /// The bid, if this is one.
    pub fn into_bid(self) -> Option<Bid> {
        match self {
            Event::Bid(b) => Some(b),
            _ => None,
        }
    }

    /// The person, if this is one.
    pub fn into_person(self) -> Option<Person> {
        match self {
            Event::Person(p) => Some(p),
            _ => None,
        }
    }

    /// The auction, if this is one.
    pub fn into_auction(self) -> Option<Auction> {
        match self {
            Event::Auction(a) => Some(a),
            _ => None,
        }
    }
}
