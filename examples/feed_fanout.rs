//! Example 7: feed fan-out with posts and follows, push, pull and hybrid.
//!
//! Students follow each other, the principal and the coach; everyone posts; a *read*
//! asks for a user's feed: the [`FEED_LEN`] newest posts of the authors they follow,
//! posted after they followed them and up to the read. Three ways to build it, on the
//! same input:
//!
//! - **push** (fan-out on write): a post is copied (its id) into the feed state of each
//!   follower; a read scans only the reader's own feed;
//! - **pull** (fan-out on read): a post is stored once with its author; a read asks each
//!   followed author for their posts and merges them;
//! - **hybrid**: authors with at most `--threshold` followers push, authors with more
//!   (the principal, the coach) are pulled and merged when a feed is read.
//!
//! The job has three keyed process functions (keyed state, event-time timers):
//!
//! ```text
//!  events ──> users   (by user: whom they follow) ──pull requests──┐
//!    │                   └──────── read markers ────────┐          v
//!    └─────────────────────────────────────────────> authors (by author: followers,
//!                                                       │     stored posts)
//!                                  pushed ids, pulled posts
//!                                                       v
//!                                     feeds (by reader: pushed ids) ──> feed reads
//! ```
//!
//! Requests and answers travel on other channels than the posts, so `authors` and
//! `feeds` answer a read at time `t` only when their watermark passes `t`: by then every
//! post up to `t` has arrived, and the feed is the same whatever the timing and the
//! strategy. The run prints each read's feed and what each strategy cost: copies
//! written (feed entries and stored posts) and, per read, pull requests and records
//! touched (feed entries and stored posts scanned).
//!
//! ```sh
//! cargo run --release --example feed_fanout                 # reads in the file + costs
//! cargo run --release --example feed_fanout -- --feed ava   # ava's feed now
//! cargo run --release --example feed_fanout -- --threshold 2 --parallelism 4
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context};
use brook::engine::testing::{CollectSink, VecSource};
use brook::prelude::*;
use clap::Parser;
use serde::{Deserialize, Serialize};

/// A read returns this many posts, newest first.
const FEED_LEN: usize = 10;

/// One line of the input (JSON lines, `kind` says which).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
enum Event {
    /// `user` follows `author` from `ts` on.
    Follow {
        user: String,
        author: String,
        ts: i64,
    },
    /// `author` posts post number `post`.
    Post { author: String, post: u64, ts: i64 },
    /// `user` reads their feed.
    Read { user: String, ts: i64 },
}

impl Event {
    fn ts(&self) -> i64 {
        match self {
            Event::Follow { ts, .. } | Event::Post { ts, .. } | Event::Read { ts, .. } => *ts,
        }
    }
}

/// A post as feeds hold it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
struct PostRef {
    ts: i64,
    post: u64,
    author: String,
}

/// What flows between the process functions.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Msg {
    /// An input event.
    In(Event),
    /// users -> authors: `reader`'s read at `until` asks for `author`'s stored posts
    /// since `since` (when the reader followed).
    Pull {
        author: String,
        reader: String,
        since: i64,
        until: i64,
    },
    /// users -> feeds: `reader` reads at `ts`; `pulls` answers will come.
    Await { reader: String, ts: i64, pulls: u32 },
    /// authors -> feeds: a post pushed into `reader`'s feed.
    Push { reader: String, post: PostRef },
    /// authors -> feeds: the answer to one pull of `reader`'s read at `ts`: the newest
    /// posts (at most FEED_LEN), `scanned` of them read.
    Pulled {
        reader: String,
        ts: i64,
        posts: Vec<PostRef>,
        scanned: u64,
    },
}

impl Msg {
    /// The key of `users` and `feeds`: who follows, reads or receives (the author for
    /// posts and pulls, which go to `authors` only).
    fn reader(&self) -> String {
        match self {
            Msg::Await { reader, .. } | Msg::Push { reader, .. } | Msg::Pulled { reader, .. } => {
                reader.clone()
            }
            Msg::In(Event::Follow { user, .. } | Event::Read { user, .. }) => user.clone(),
            Msg::In(Event::Post { author, .. }) | Msg::Pull { author, .. } => author.clone(),
        }
    }

    /// The key of `authors`: whose followers, posts or stored posts.
    fn author(&self) -> String {
        match self {
            Msg::In(Event::Follow { author, .. } | Event::Post { author, .. })
            | Msg::Pull { author, .. } => author.clone(),
            other => other.reader(),
        }
    }
}

/// One answered read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct FeedRead {
    user: String,
    ts: i64,
    /// Post ids, newest first.
    posts: Vec<u64>,
    /// Pull requests this read sent.
    pulls: u32,
    /// Feed entries and stored posts this read looked at.
    touched: u64,
}

/// How posts reach feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strategy {
    /// Every post is pushed into every follower's feed.
    Push,
    /// Every post is stored with its author and pulled by reads.
    Pull,
    /// Authors with at most this many followers push, the others are pulled.
    Hybrid(u64),
}

impl Strategy {
    fn pushes(self, followers: u64) -> bool {
        match self {
            Strategy::Push => true,
            Strategy::Pull => false,
            Strategy::Hybrid(t) => followers <= t,
        }
    }

    fn name(self) -> String {
        match self {
            Strategy::Push => "push only".into(),
            Strategy::Pull => "pull only".into(),
            Strategy::Hybrid(t) => format!("hybrid (push at <= {t} followers)"),
        }
    }
}

/// Copies written, over all subtasks.
#[derive(Debug, Default)]
struct Writes {
    /// Post ids written into followers' feeds.
    pushed: AtomicU64,
    /// Posts stored with their authors for pulls.
    stored: AtomicU64,
}

const FOLLOWS: StateDescriptor<(String, i64)> = StateDescriptor::new("follows");
const FOLLOWERS: StateDescriptor<Vec<String>> = StateDescriptor::new("followers");
const POSTS: StateDescriptor<Vec<PostRef>> = StateDescriptor::new("posts");
const PENDING_PULLS: StateDescriptor<Vec<(String, i64, i64)>> =
    StateDescriptor::new("pending-pulls");
const FEED: StateDescriptor<Vec<PostRef>> = StateDescriptor::new("feed");
/// Pushed posts waiting for the watermark, by post time.
const ARRIVED: StateDescriptor<(i64, PostRef)> = StateDescriptor::new("arrived");
/// A read waiting for the watermark and its pull answers, by read time.
const READS: StateDescriptor<(i64, PendingRead)> = StateDescriptor::new("reads");

/// A read of `Feeds`: the pull answers expected and received so far.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct PendingRead {
    /// Pull answers to wait for.
    pulls: u32,
    /// Pull answers received.
    answers: u32,
    /// The posts they brought.
    pulled: Vec<PostRef>,
    /// Stored posts they read.
    scanned: u64,
}

/// Keyed by user: whom they follow (and since when); turns a read into pull requests.
struct Users {
    strategy: Strategy,
}

impl KeyedProcessFunction for Users {
    type Key = String;
    type In = Msg;
    type Out = Msg;

    fn process_element(
        &mut self,
        msg: Msg,
        ctx: &mut KeyedContext<'_, String>,
        out: &mut Output<Msg>,
    ) -> OpResult {
        match msg {
            Msg::In(Event::Follow { author, ts, .. }) => ctx
                .state()
                .map(&FOLLOWS)
                .put(&author, &ts)
                .map_err(OperatorError::other)?,
            Msg::In(Event::Read { user, ts }) => {
                // Push only: everything is in the reader's feed already.
                let follows = if self.strategy == Strategy::Push {
                    Vec::new()
                } else {
                    ctx.state()
                        .map(&FOLLOWS)
                        .entries()
                        .map_err(OperatorError::other)?
                };
                for (author, since) in &follows {
                    let pull = Msg::Pull {
                        author: author.clone(),
                        reader: user.clone(),
                        since: *since,
                        until: ts,
                    };
                    out.collect(pull, Some(ts));
                }
                let pulls = u32::try_from(follows.len()).map_err(OperatorError::other)?;
                out.collect(
                    Msg::Await {
                        reader: user,
                        ts,
                        pulls,
                    },
                    Some(ts),
                );
            }
            _ => {}
        }
        Ok(())
    }
}

/// Keyed by author: their followers; pushes each post to them or stores it, and
/// answers pull requests once the watermark has passed the read.
struct Authors {
    strategy: Strategy,
    writes: Arc<Writes>,
}

impl KeyedProcessFunction for Authors {
    type Key = String;
    type In = Msg;
    type Out = Msg;

    fn process_element(
        &mut self,
        msg: Msg,
        ctx: &mut KeyedContext<'_, String>,
        out: &mut Output<Msg>,
    ) -> OpResult {
        match msg {
            Msg::In(Event::Follow { user, .. }) => ctx
                .state()
                .list(&FOLLOWERS)
                .add(user)
                .map_err(OperatorError::other)?,
            Msg::In(Event::Post { author, post, ts }) => {
                let post = PostRef { ts, post, author };
                let followers = ctx
                    .state()
                    .list(&FOLLOWERS)
                    .get()
                    .map_err(OperatorError::other)?;
                if self.strategy.pushes(followers.len() as u64) {
                    for reader in followers {
                        self.writes.pushed.fetch_add(1, Ordering::Relaxed);
                        let push = Msg::Push {
                            reader,
                            post: post.clone(),
                        };
                        out.collect(push, Some(ts));
                    }
                } else {
                    self.writes.stored.fetch_add(1, Ordering::Relaxed);
                    ctx.state()
                        .list(&POSTS)
                        .add(post)
                        .map_err(OperatorError::other)?;
                }
            }
            Msg::Pull {
                reader,
                since,
                until,
                ..
            } => {
                // A post up to `until` may still be on its way (on another channel):
                // answer when the watermark has passed `until`.
                ctx.state()
                    .list(&PENDING_PULLS)
                    .add((reader, since, until))
                    .map_err(OperatorError::other)?;
                ctx.register_event_time_timer(until);
            }
            _ => {}
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        ts: Millis,
        _domain: TimeDomain,
        ctx: &mut KeyedContext<'_, String>,
        out: &mut Output<Msg>,
    ) -> OpResult {
        let pending = ctx
            .state()
            .list(&PENDING_PULLS)
            .get()
            .map_err(OperatorError::other)?;
        let (due, later): (Vec<_>, Vec<_>) = pending.into_iter().partition(|p| p.2 <= ts);
        ctx.state()
            .list(&PENDING_PULLS)
            .update(&later)
            .map_err(OperatorError::other)?;
        if due.is_empty() {
            return Ok(());
        }
        let stored = ctx
            .state()
            .list(&POSTS)
            .get()
            .map_err(OperatorError::other)?;
        for (reader, since, until) in due {
            // The posts are stored in time order: from the newest up to the read (a
            // timeline index would seek there), at most FEED_LEN after `since`.
            let posts: Vec<PostRef> = stored
                .iter()
                .rev()
                .skip_while(|p| p.ts > until)
                .take_while(|p| p.ts > since)
                .take(FEED_LEN)
                .cloned()
                .collect();
            let answer = Msg::Pulled {
                reader,
                ts: until,
                scanned: posts.len() as u64,
                posts,
            };
            out.collect(answer, Some(until));
        }
        Ok(())
    }
}

/// Keyed by reader: their feed (the FEED_LEN newest pushed posts); merges it with the
/// pulled posts and answers a read once the watermark has passed it.
///
/// Pushes come on another channel than reads and may arrive before a read of an
/// earlier time: they enter the feed when the watermark passes their time (a timer),
/// so the feed a read sees holds exactly the posts up to the read.
struct Feeds;

impl KeyedProcessFunction for Feeds {
    type Key = String;
    type In = Msg;
    type Out = FeedRead;

    fn process_element(
        &mut self,
        msg: Msg,
        ctx: &mut KeyedContext<'_, String>,
        _out: &mut Output<FeedRead>,
    ) -> OpResult {
        match msg {
            Msg::Push { post, .. } => {
                let ts = post.ts;
                ctx.state()
                    .map(&ARRIVED)
                    .put(&ts, &post)
                    .map_err(OperatorError::other)?;
                ctx.register_event_time_timer(ts);
            }
            Msg::Await { ts, pulls, .. } => {
                let mut reads = ctx.state().map(&READS);
                let mut r = reads
                    .get(&ts)
                    .map_err(OperatorError::other)?
                    .unwrap_or_default();
                r.pulls = pulls;
                reads.put(&ts, &r).map_err(OperatorError::other)?;
                ctx.register_event_time_timer(ts);
            }
            Msg::Pulled {
                ts, posts, scanned, ..
            } => {
                let mut reads = ctx.state().map(&READS);
                let mut r = reads
                    .get(&ts)
                    .map_err(OperatorError::other)?
                    .unwrap_or_default();
                r.answers += 1;
                r.pulled.extend(posts);
                r.scanned += scanned;
                reads.put(&ts, &r).map_err(OperatorError::other)?;
            }
            _ => {}
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        ts: Millis,
        _domain: TimeDomain,
        ctx: &mut KeyedContext<'_, String>,
        out: &mut Output<FeedRead>,
    ) -> OpResult {
        // A push whose time has come enters the feed; the oldest beyond FEED_LEN go.
        if let Some(post) = ctx
            .state()
            .map(&ARRIVED)
            .get(&ts)
            .map_err(OperatorError::other)?
        {
            ctx.state()
                .map(&ARRIVED)
                .remove(&ts)
                .map_err(OperatorError::other)?;
            let mut feed = ctx
                .state()
                .list(&FEED)
                .get()
                .map_err(OperatorError::other)?;
            feed.push(post);
            feed.sort_unstable_by(|a, b| b.cmp(a));
            feed.truncate(FEED_LEN);
            ctx.state()
                .list(&FEED)
                .update(&feed)
                .map_err(OperatorError::other)?;
        }
        let Some(PendingRead {
            pulls,
            answers,
            pulled,
            scanned,
        }) = ctx
            .state()
            .map(&READS)
            .get(&ts)
            .map_err(OperatorError::other)?
        else {
            return Ok(());
        };
        ctx.state()
            .map(&READS)
            .remove(&ts)
            .map_err(OperatorError::other)?;
        if answers != pulls {
            return Err(OperatorError::failed(format!(
                "read of {} at {ts}: {answers} of {pulls} pull answers arrived before the watermark",
                ctx.key()
            )));
        }
        let feed = ctx
            .state()
            .list(&FEED)
            .get()
            .map_err(OperatorError::other)?;
        let touched = feed.len() as u64 + scanned;
        let mut merged = feed;
        merged.extend(pulled);
        merged.sort_unstable_by(|a, b| b.cmp(a));
        merged.truncate(FEED_LEN);
        let read = FeedRead {
            user: ctx.key().clone(),
            ts,
            posts: merged.iter().map(|p| p.post).collect(),
            pulls,
            touched,
        };
        out.collect(read, Some(ts));
        Ok(())
    }
}

/// What one run produced and cost.
#[derive(Debug)]
struct Outcome {
    strategy: Strategy,
    /// The reads, in input order.
    reads: Vec<FeedRead>,
    pushed: u64,
    stored: u64,
}

impl Outcome {
    fn copies(&self) -> u64 {
        self.pushed + self.stored
    }

    fn pulls(&self) -> u64 {
        self.reads.iter().map(|r| u64::from(r.pulls)).sum()
    }

    fn touched(&self) -> u64 {
        self.reads.iter().map(|r| r.touched).sum()
    }
}

/// Runs the job over `events` with one strategy.
fn run(events: &[Event], strategy: Strategy, parallelism: u32) -> anyhow::Result<Outcome> {
    let env = StreamEnvironment::new(JobConfig::with_parallelism(parallelism));
    let records: Vec<Msg> = events.iter().cloned().map(Msg::In).collect();
    // One reader: the events keep their order; a watermark after each.
    let input = env
        .from_source(
            VecSource::new(records),
            WatermarkStrategy::for_bounded_out_of_orderness(0)
                .with_timestamp_assigner(|m: &Msg, _| match m {
                    Msg::In(e) => e.ts(),
                    _ => i64::MIN,
                })
                .with_emit_interval(0),
        )
        .set_parallelism(1);
    let users = input
        .clone()
        .filter(|m| matches!(m, Msg::In(Event::Follow { .. } | Event::Read { .. })))
        // Chained to the source: a filter of another parallelism would get the events
        // round-robin and could reorder a key's events.
        .set_parallelism(1)
        .key_by(Msg::reader)
        .process(move || Users { strategy })
        .name("users");
    let writes = Arc::new(Writes::default());
    let w = Arc::clone(&writes);
    let authors = input
        .filter(|m| matches!(m, Msg::In(Event::Follow { .. } | Event::Post { .. })))
        .set_parallelism(1)
        .union(users.clone().filter(|m| matches!(m, Msg::Pull { .. })))
        .key_by(Msg::author)
        .process(move || Authors {
            strategy,
            writes: Arc::clone(&w),
        })
        .name("authors");
    let sink = CollectSink::new();
    users
        .filter(|m| matches!(m, Msg::Await { .. }))
        .union(authors)
        .key_by(Msg::reader)
        .process(|| Feeds)
        .name("feeds")
        .sink(sink.clone());
    env.execute("feed-fanout")
        .with_context(|| format!("running the {} job", strategy.name()))?;
    let mut reads = sink.values();
    reads.sort_by_key(|r| r.ts);
    Ok(Outcome {
        strategy,
        reads,
        pushed: writes.pushed.load(Ordering::Relaxed),
        stored: writes.stored.load(Ordering::Relaxed),
    })
}

/// Reads the events, one JSON object a line; errors name the line.
fn read_events(path: &std::path::Path) -> anyhow::Result<Vec<Event>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut events = Vec::new();
    let mut last = i64::MIN;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let e: Event = serde_json::from_str(line)
            .with_context(|| format!("{}:{}: not an event", path.display(), i + 1))?;
        if e.ts() <= last {
            // The feeds are exact only when no two events share a time.
            bail!(
                "{}:{}: ts {} is not after the previous event's",
                path.display(),
                i + 1,
                e.ts()
            );
        }
        last = e.ts();
        events.push(e);
    }
    Ok(events)
}

/// Feed fan-out: push, pull and hybrid on the same posts and follows.
#[derive(Debug, Parser)]
struct Args {
    /// The events (JSON lines of follow, post and read).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/feed_events.jsonl"))]
    events: PathBuf,
    /// Show USER's feed after the last event (a read added at the end).
    #[arg(long, value_name = "USER")]
    feed: Option<String>,
    /// Hybrid: authors with more followers than this are pulled.
    #[arg(long, default_value_t = 5)]
    threshold: u64,
    /// Subtasks of each process function.
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
}

/// Runs the three strategies; checks that they give the same feeds.
fn compare(args: &Args) -> anyhow::Result<Vec<Outcome>> {
    let mut events = read_events(&args.events)?;
    if let Some(user) = &args.feed {
        let ts = events.last().map_or(0, |e| e.ts() + 1);
        events.push(Event::Read {
            user: user.clone(),
            ts,
        });
    }
    let outcomes = [
        Strategy::Push,
        Strategy::Pull,
        Strategy::Hybrid(args.threshold),
    ]
    .into_iter()
    .map(|s| run(&events, s, args.parallelism))
    .collect::<anyhow::Result<Vec<_>>>()?;
    let feeds = |o: &Outcome| -> Vec<(String, i64, Vec<u64>)> {
        o.reads
            .iter()
            .map(|r| (r.user.clone(), r.ts, r.posts.clone()))
            .collect()
    };
    for o in &outcomes[1..] {
        if feeds(o) != feeds(&outcomes[0]) {
            bail!(
                "{} and {} gave different feeds",
                o.strategy.name(),
                outcomes[0].strategy.name()
            );
        }
    }
    Ok(outcomes)
}

/// `HH:MM` (UTC) of a time in ms since the epoch.
fn clock(ts: i64) -> String {
    let minutes = ts.div_euclid(60_000).rem_euclid(24 * 60);
    format!("{:02}:{:02}", minutes / 60, minutes % 60)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let outcomes = compare(&args)?;
    let events = read_events(&args.events)?;
    let posts: BTreeMap<u64, (String, i64)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Post { author, post, ts } => Some((*post, (author.clone(), *ts))),
            _ => None,
        })
        .collect();
    let hybrid = &outcomes[2];
    let shown: Vec<&FeedRead> = match &args.feed {
        // Only the read added at the end.
        Some(_) => hybrid.reads.last().into_iter().collect(),
        None => hybrid.reads.iter().collect(),
    };
    for r in shown {
        println!(
            "feed of {} at {} (the same under all three strategies):",
            r.user,
            clock(r.ts)
        );
        for id in &r.posts {
            let (author, ts) = posts.get(id).cloned().unwrap_or_default();
            println!("  post {id:>3} by {author:<10} at {}", clock(ts));
        }
    }
    let reads = hybrid.reads.len().max(1) as f64;
    println!();
    println!(
        "{} events, {} posts, {} reads, parallelism {}",
        events.len(),
        posts.len(),
        hybrid.reads.len(),
        args.parallelism
    );
    println!(
        "{:<36} {:>14} {:>16} {:>20}",
        "strategy", "copies written", "pulls per read", "touched per read"
    );
    for o in &outcomes {
        println!(
            "{:<36} {:>14} {:>16.1} {:>20.1}",
            o.strategy.name(),
            o.copies(),
            o.pulls() as f64 / reads,
            o.touched() as f64 / reads
        );
    }
    println!(
        "copies written: post ids pushed into feeds + posts stored for pulls; touched: feed entries and stored posts a read looked at"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> Vec<Event> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/data/feed_events.jsonl"
        );
        read_events(std::path::Path::new(path)).expect("the example's events parse")
    }

    /// Per read: user, time, post ids newest first.
    type ReadFeeds = Vec<(String, i64, Vec<u64>)>;

    /// The feeds, ids pushed and posts stored, computed directly, one event after the
    /// other.
    fn oracle(events: &[Event], strategy: Strategy) -> (ReadFeeds, u64, u64) {
        let mut follows: Vec<(String, String, i64)> = Vec::new();
        let mut posts: Vec<PostRef> = Vec::new();
        let (mut pushed, mut stored) = (0, 0);
        let mut reads = Vec::new();
        for e in events {
            match e {
                Event::Follow { user, author, ts } => {
                    follows.push((user.clone(), author.clone(), *ts))
                }
                Event::Post { author, post, ts } => {
                    let n = follows.iter().filter(|f| &f.1 == author).count() as u64;
                    if strategy.pushes(n) {
                        pushed += n;
                    } else {
                        stored += 1;
                    }
                    posts.push(PostRef {
                        ts: *ts,
                        post: *post,
                        author: author.clone(),
                    });
                }
                Event::Read { user, ts } => {
                    let mut feed: Vec<&PostRef> = posts
                        .iter()
                        .filter(|p| {
                            follows
                                .iter()
                                .any(|f| &f.0 == user && f.1 == p.author && f.2 < p.ts)
                        })
                        .collect();
                    feed.sort_by(|a, b| b.cmp(a));
                    let ids = feed.iter().take(FEED_LEN).map(|p| p.post).collect();
                    reads.push((user.clone(), *ts, ids));
                }
            }
        }
        (reads, pushed, stored)
    }

    #[test]
    fn every_strategy_gives_the_feeds_of_the_oracle_at_any_parallelism() {
        let events = data();
        for parallelism in [1, 3] {
            for strategy in [Strategy::Push, Strategy::Pull, Strategy::Hybrid(5)] {
                let o = run(&events, strategy, parallelism).expect("the job runs");
                let (want, pushed, stored) = oracle(&events, strategy);
                let got: Vec<_> = o
                    .reads
                    .iter()
                    .map(|r| (r.user.clone(), r.ts, r.posts.clone()))
                    .collect();
                assert_eq!(
                    got,
                    want,
                    "{} at parallelism {parallelism}",
                    strategy.name()
                );
                assert_eq!(
                    (o.pushed, o.stored),
                    (pushed, stored),
                    "{}",
                    strategy.name()
                );
            }
        }
    }

    #[test]
    fn the_strategies_cost_what_the_readme_says() {
        let args = Args {
            events: concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/examples/data/feed_events.jsonl"
            )
            .into(),
            feed: Some("ava".into()),
            threshold: 5,
            parallelism: 2,
        };
        let o = compare(&args).expect("the strategies agree");
        let figures: Vec<(u64, u64, u64)> = o
            .iter()
            .map(|o| (o.copies(), o.pulls(), o.touched()))
            .collect();
        eprintln!("{figures:?}");
        // 6 reads in the file and ava's at the end.
        assert!(o.iter().all(|o| o.reads.len() == 7));
        let [push, pull, hybrid] = [&o[0], &o[1], &o[2]];
        // Pull stores each of the 100 posts once; push copies it to every follower.
        assert_eq!(pull.copies(), 100);
        assert_eq!(push.copies(), 468);
        assert_eq!(hybrid.copies(), 190);
        // Hybrid writes less than push (the principal and the coach are pulled) and
        // pulls only from those two... but asks every followed author.
        assert!(hybrid.copies() < push.copies() && hybrid.copies() > pull.copies());
        assert_eq!(push.pulls(), 0);
        assert_eq!(hybrid.pulls(), pull.pulls());
        // A pull-only read scans every followed author's posts; hybrid only the big
        // authors' and the reader's own short feed.
        assert!(hybrid.touched() < pull.touched());
        let ava = &hybrid.reads[6];
        assert_eq!(ava.user, "ava");
        assert_eq!(ava.posts.len(), FEED_LEN);
    }

    #[test]
    fn bad_input_names_the_line() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("events.jsonl");
        std::fs::write(
            &path,
            "{\"kind\":\"post\",\"author\":\"a\",\"post\":1,\"ts\":5}\n{\"kind\":\"poke\",\"ts\":6}\n",
        )
        .expect("write");
        let e = read_events(&path).expect_err("an unknown kind");
        assert!(format!("{e:#}").contains("events.jsonl:2"), "{e:#}");
        std::fs::write(
            &path,
            "{\"kind\":\"read\",\"user\":\"a\",\"ts\":5}\n{\"kind\":\"read\",\"user\":\"b\",\"ts\":5}\n",
        )
        .expect("write");
        let e = read_events(&path).expect_err("equal times");
        assert!(format!("{e:#}").contains("not after"), "{e:#}");
    }
}
