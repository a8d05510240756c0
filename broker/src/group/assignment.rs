//! A member's assignment as Kafka's consumer protocol writes it: the partitions a
//! client-side assignor gave it, for describing groups (`brook group describe`, the
//! dashboard). The broker itself never reads it (Kafka's classic protocol leaves the
//! assignment to the clients).

use bytes::{Buf, Bytes};
use kafka_protocol::messages::ConsumerProtocolAssignment;
use kafka_protocol::protocol::Decodable;

/// The partitions of a member's assignment (a version, then the
/// ConsumerProtocolAssignment of that version), sorted; empty if it is not one.
pub fn assigned_partitions(bytes: &[u8]) -> Vec<(String, u32)> {
    let mut buf = Bytes::copy_from_slice(bytes);
    if buf.remaining() < 2 {
        return Vec::new();
    }
    let version = buf.get_i16();
    let Ok(a) = ConsumerProtocolAssignment::decode(&mut buf, version) else {
        return Vec::new();
    };
    let mut out: Vec<(String, u32)> = a
        .assigned_partitions
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .filter_map(|p| Some((t.topic.to_string(), u32::try_from(*p).ok()?)))
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn a_members_assignment_decodes_to_its_partitions() {
        let a = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![
            TopicPartition::default()
                .with_topic(StrBytes::from_static_str("sales").into())
                .with_partitions(vec![3, 1]),
        ]);
        let mut buf = bytes::BytesMut::new();
        bytes::BufMut::put_i16(&mut buf, 1);
        a.encode(&mut buf, 1).expect("encode");
        assert_eq!(
            assigned_partitions(&buf),
            vec![("sales".to_string(), 1), ("sales".to_string(), 3)]
        );
        assert_eq!(assigned_partitions(&[0]), Vec::<(String, u32)>::new());
    }
}
