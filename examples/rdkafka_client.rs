//! A librdkafka client process (the `rdkafka` crate) for a Kafka-protocol broker such
//! as `brook broker`: a producer that appends snack sales until its stdin closes, or a
//! consumer-group member that prints what it reads and commits after printing.
//! tests/broker_story.rs runs several of them as separate processes.
//!
//! ```sh
//! brook broker --data-dir /tmp/shop &            # serves 127.0.0.1:9092
//! brook --data-dir /tmp/shop topic create snack-sales --partitions 3   # through the broker
//! cargo run --example rdkafka_client -- produce 127.0.0.1:9092 snack-sales rk
//! cargo run --example rdkafka_client -- consume 127.0.0.1:9092 snack-sales billing 6000
//! ```
//!
//! `produce BOOTSTRAP TOPIC PREFIX`: records `PREFIX-0`, `PREFIX-1`, ... keyed by a
//! student's name, one every 5 ms with `acks=all`, until stdin reaches its end; then
//! waits for every acknowledgement and prints `produced N` (exit 1 if one failed).
//!
//! `consume BOOTSTRAP TOPIC GROUP SESSION_MS`: joins GROUP (session timeout SESSION_MS,
//! heartbeats every tenth of it, cooperative-sticky assignor: a partition moves only when it must) and prints `assigned P,P,...` after
//! every rebalance and `record P OFFSET VALUE` per record, flushed; the offset is stored
//! for the next automatic commit (every 100 ms) only after its line is written, so a
//! killed member's commits never cover a record it did not print. When stdin reaches
//! its end it leaves the group cleanly (committing first) and prints `closed`.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaResult;
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{ClientConfig, ClientContext, Message};

const STUDENTS: [&str; 8] = ["ivy", "kai", "omar", "mia", "leo", "zoe", "sam", "ana"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["produce", bootstrap, topic, prefix] => produce(bootstrap, topic, prefix),
        ["consume", bootstrap, topic, group, session_ms] => {
            let session_ms: u64 = session_ms
                .parse()
                .map_err(|_| format!("SESSION_MS {session_ms:?}: not a number of ms"))?;
            consume(bootstrap, topic, group, session_ms)
        }
        _ => Err("usage: rdkafka_client produce BOOTSTRAP TOPIC PREFIX | \
                  consume BOOTSTRAP TOPIC GROUP SESSION_MS"
            .into()),
    }
}

/// Set once stdin has reached its end (read by a thread of its own, so the main loop
/// never blocks on it).
fn stdin_closed() -> Arc<AtomicBool> {
    let closed = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&closed);
    std::thread::spawn(move || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        flag.store(true, Ordering::SeqCst);
    });
    closed
}

/// Counts the records whose delivery failed.
#[derive(Default)]
struct Deliveries {
    failed: AtomicUsize,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            eprintln!("delivery failed: {e}");
            self.failed.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn produce(bootstrap: &str, topic: &str, prefix: &str) -> Result<(), Box<dyn std::error::Error>> {
    let producer: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("linger.ms", "5")
        .create_with_context(Deliveries::default())?;
    let closed = stdin_closed();
    let mut n = 0usize;
    while !closed.load(Ordering::SeqCst) {
        let value = format!("{prefix}-{n}");
        let key = STUDENTS[n % STUDENTS.len()];
        producer
            .send(BaseRecord::to(topic).key(key).payload(&value))
            .map_err(|(e, _)| e)?;
        n += 1;
        producer.poll(Duration::from_millis(5));
    }
    producer.flush(Duration::from_secs(30))?;
    let failed = producer.context().failed.load(Ordering::SeqCst);
    if failed > 0 {
        return Err(format!("{failed} of {n} records were not delivered").into());
    }
    println!("produced {n}");
    Ok(())
}

/// Prints the member's whole assignment after each rebalance.
struct Member;

impl ClientContext for Member {}

impl ConsumerContext for Member {
    fn post_rebalance(&self, consumer: &BaseConsumer<Member>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Error(e) = rebalance {
            eprintln!("rebalance error: {e}");
            return;
        }
        let mut partitions: Vec<i32> = consumer
            .assignment()
            .map(|l| l.elements().iter().map(|e| e.partition()).collect())
            .unwrap_or_default();
        partitions.sort_unstable();
        let list: Vec<String> = partitions.iter().map(i32::to_string).collect();
        say(&format!("assigned {}", list.join(",")));
    }
}

/// One line on stdout, flushed at once (the test reads it while this process runs,
/// and a SIGKILL must not lose what was printed).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn consume(
    bootstrap: &str,
    topic: &str,
    group: &str,
    session_ms: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let consumer: BaseConsumer<Member> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("session.timeout.ms", session_ms.to_string())
        .set(
            "heartbeat.interval.ms",
            (session_ms / 10).max(1).to_string(),
        )
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "100")
        .set("enable.auto.offset.store", "false")
        .create_with_context(Member)?;
    consumer.subscribe(&[topic])?;
    let closed = stdin_closed();
    while !closed.load(Ordering::SeqCst) {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let value = String::from_utf8_lossy(m.payload().unwrap_or_default());
                say(&format!("record {} {} {value}", m.partition(), m.offset()));
                store(consumer.store_offset_from_message(&m));
            }
            Some(Err(e)) => eprintln!("consumer error: {e}"),
            None => {}
        }
    }
    // Dropping the consumer closes it: the stored offsets are committed, then it
    // leaves the group (LeaveGroup), so the others rebalance at once.
    drop(consumer);
    say("closed");
    Ok(())
}

/// A store fails only for a partition no longer assigned (revoked meanwhile): the new
/// owner reads that record again, which is the at-least-once contract.
fn store(result: KafkaResult<()>) {
    if let Err(e) = result {
        eprintln!("offset not stored: {e}");
    }
}
