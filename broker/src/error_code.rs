//! Log errors as Kafka protocol error codes.

use brook_log::LogError;
use kafka_protocol::error::ResponseError;

/// The Kafka error code a client gets for a log error, with the rule's source: the
/// codes Kafka's broker returns for the same situation.
pub fn error_code(e: &LogError) -> i16 {
    let code = match e {
        LogError::UnknownTopic(_) | LogError::UnknownPartition { .. } => {
            ResponseError::UnknownTopicOrPartition
        }
        LogError::TopicExists(_) => ResponseError::TopicAlreadyExists,
        LogError::InvalidName(_) => ResponseError::InvalidTopicException,
        LogError::InvalidConfig { .. } => ResponseError::InvalidConfig,
        LogError::RecordTooLarge { .. } => ResponseError::MessageTooLarge,
        // A keyless record for a compacted topic, as Kafka's INVALID_RECORD.
        LogError::InvalidRecord { .. } => ResponseError::InvalidRecord,
        LogError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        LogError::Corrupt { .. } => ResponseError::CorruptMessage,
        LogError::ProducerFenced { .. } => ResponseError::ProducerFenced,
        LogError::InvalidTransactionTimeout { .. } => ResponseError::InvalidTransactionTimeout,
        LogError::InvalidTransactionState { .. } | LogError::TransactionNotOpen { .. } => {
            ResponseError::InvalidTxnState
        }
        // I/O errors, a closed log, groups: the
        // client may retry, as after Kafka's UNKNOWN_SERVER_ERROR.
        _ => ResponseError::UnknownServerError,
    };
    code.code()
}
