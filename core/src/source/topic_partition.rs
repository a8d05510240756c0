//! The split of the sources that read a partitioned topic (the embedded log, Kafka).

use std::fmt::{Debug, Display};

use super::Split;

/// One partition of a topic: the split of the log and Kafka sources, whose id is
/// `topic/partition`. `P` is the partition number as the log (`u32`) or Kafka (`i32`)
/// counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPartitionSplit<P> {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: P,
}

impl<P: Display + Debug + Clone + Send + 'static> Split for TopicPartitionSplit<P> {
    fn split_id(&self) -> String {
        format!("{}/{}", self.topic, self.partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_id_is_topic_slash_partition() {
        let s = TopicPartitionSplit {
            topic: "clicks".to_string(),
            partition: 3u32,
        };
        assert_eq!(s.split_id(), "clicks/3");
    }
}
