//! IncrementalAlterConfigs (KIP-339) of one topic through librdkafka: what
//! `kafka-configs --alter --add-config` sends. The `rdkafka` crate wraps only the
//! legacy AlterConfigs (which replaces a topic's whole set, so a config not sent
//! returns to its default); this calls librdkafka's `rd_kafka_IncrementalAlterConfigs`
//! itself, on the client's own connection, with a result queue of its own.

use std::ffi::{c_char, c_int, CStr, CString};
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::client::{Client, ClientContext};
use rdkafka::types::RDKafkaErrorCode;
use thiserror::Error;

/// One change of a config (Kafka's `AlterConfigOp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlterOp<'a> {
    /// SET the value.
    Set(&'a str),
    /// DELETE: back to the default.
    Delete,
    /// APPEND items to a list config.
    Append(&'a str),
    /// SUBTRACT items from a list config.
    Subtract(&'a str),
}

/// Why a topic's configs were not altered.
#[derive(Debug, Error)]
pub enum AlterConfigsError {
    /// A name or value holds a NUL byte, or librdkafka refused the request before
    /// sending it.
    #[error("{0}")]
    Request(String),
    /// The broker did not answer within the timeout.
    #[error("no answer from the broker within {0:?}")]
    Timeout(Duration),
    /// The broker (or librdkafka) refused: its error code and message.
    #[error("{message} ({code})")]
    Refused {
        /// The error code.
        code: RDKafkaErrorCode,
        /// The broker's message (naming the config, for INVALID_CONFIG).
        message: String,
    },
}

/// Frees a librdkafka object when dropped.
struct Owned<T> {
    ptr: *mut T,
    free: unsafe extern "C" fn(*mut T),
}

impl<T> Drop for Owned<T> {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: `ptr` came from the librdkafka constructor `free` belongs to
            // and is freed once, here.
            unsafe { (self.free)(self.ptr) }
        }
    }
}

fn c_string(what: &str, text: &str) -> Result<CString, AlterConfigsError> {
    CString::new(text)
        .map_err(|_| AlterConfigsError::Request(format!("{what} {text:?} holds a NUL byte")))
}

/// A librdkafka string (NULL: empty) as an owned `String`.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string valid for this call.
#[allow(unsafe_code)]
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: the caller's promise.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// Applies `changes` to the configs of `topic` with one IncrementalAlterConfigs
/// request of `client` (an admin client's [`rdkafka::admin::AdminClient::inner`], or
/// any other client of the broker); with `validate_only` the broker only checks them.
/// Waits up to `timeout` for the answer.
///
/// # Errors
/// [`AlterConfigsError`]: the broker's refusal carries its code and message
/// (INVALID_CONFIG naming the config, UNKNOWN_TOPIC_OR_PARTITION, ...).
#[allow(unsafe_code)]
pub fn incremental_alter_topic_configs<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    changes: &[(&str, AlterOp<'_>)],
    validate_only: bool,
    timeout: Duration,
) -> Result<(), AlterConfigsError> {
    use rd::rd_kafka_AlterConfigOpType_t as OpType;
    let name = c_string("topic", topic)?;
    let mut texts = Vec::with_capacity(changes.len());
    for (config, op) in changes {
        let (op_type, value) = match op {
            AlterOp::Set(v) => (OpType::RD_KAFKA_ALTER_CONFIG_OP_TYPE_SET, Some(*v)),
            AlterOp::Delete => (OpType::RD_KAFKA_ALTER_CONFIG_OP_TYPE_DELETE, None),
            AlterOp::Append(v) => (OpType::RD_KAFKA_ALTER_CONFIG_OP_TYPE_APPEND, Some(*v)),
            AlterOp::Subtract(v) => (OpType::RD_KAFKA_ALTER_CONFIG_OP_TYPE_SUBTRACT, Some(*v)),
        };
        let value = value.map(|v| c_string("value", v)).transpose()?;
        texts.push((c_string("config", config)?, op_type, value));
    }
    let timeout_ms = c_int::try_from(timeout.as_millis()).unwrap_or(c_int::MAX);
    let rk = client.native_ptr();
    let mut errstr = [0 as c_char; 512];
    // SAFETY: `rk` is the live handle of `client`, borrowed for this call. Every
    // object created here is owned by an `Owned` guard and freed once on every path;
    // librdkafka copies the resources and options it is given, so freeing ours after
    // the call is its documented use. Pointers read from the result event are only
    // used while the event (their owner) is alive.
    unsafe {
        let resource = Owned {
            ptr: rd::rd_kafka_ConfigResource_new(
                rd::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC,
                name.as_ptr(),
            ),
            free: rd::rd_kafka_ConfigResource_destroy,
        };
        for (config, op_type, value) in &texts {
            let value_ptr = value.as_ref().map_or(std::ptr::null(), |v| v.as_ptr());
            let error = Owned {
                ptr: rd::rd_kafka_ConfigResource_add_incremental_config(
                    resource.ptr,
                    config.as_ptr(),
                    *op_type,
                    value_ptr,
                ),
                free: rd::rd_kafka_error_destroy,
            };
            if !error.ptr.is_null() {
                return Err(AlterConfigsError::Request(text(rd::rd_kafka_error_string(
                    error.ptr,
                ))));
            }
        }
        let options = Owned {
            ptr: rd::rd_kafka_AdminOptions_new(
                rk,
                rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_INCREMENTALALTERCONFIGS,
            ),
            free: rd::rd_kafka_AdminOptions_destroy,
        };
        let set_timeout = rd::rd_kafka_AdminOptions_set_request_timeout(
            options.ptr,
            timeout_ms,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        let set_validate = rd::rd_kafka_AdminOptions_set_validate_only(
            options.ptr,
            c_int::from(validate_only),
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        let ok = rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR;
        if set_timeout != ok || set_validate != ok {
            return Err(AlterConfigsError::Request(text(errstr.as_ptr())));
        }
        let queue = Owned {
            ptr: rd::rd_kafka_queue_new(rk),
            free: rd::rd_kafka_queue_destroy,
        };
        let mut resources = [resource.ptr];
        rd::rd_kafka_IncrementalAlterConfigs(
            rk,
            resources.as_mut_ptr(),
            resources.len(),
            options.ptr,
            queue.ptr,
        );
        // librdkafka answers by the request timeout; a little more for its own part.
        let event = Owned {
            ptr: rd::rd_kafka_queue_poll(queue.ptr, timeout_ms.saturating_add(1000)),
            free: rd::rd_kafka_event_destroy,
        };
        if event.ptr.is_null() {
            return Err(AlterConfigsError::Timeout(timeout));
        }
        let code = rd::rd_kafka_event_error(event.ptr);
        if code != ok {
            return Err(AlterConfigsError::Refused {
                code: code.into(),
                message: text(rd::rd_kafka_event_error_string(event.ptr)),
            });
        }
        let result = rd::rd_kafka_event_IncrementalAlterConfigs_result(event.ptr);
        if result.is_null() {
            return Err(AlterConfigsError::Request(
                "librdkafka answered with another event than IncrementalAlterConfigs'".into(),
            ));
        }
        let mut n = 0usize;
        let answered = rd::rd_kafka_IncrementalAlterConfigs_result_resources(result, &mut n);
        for i in 0..n {
            let r = *answered.add(i);
            let code = rd::rd_kafka_ConfigResource_error(r);
            if code != ok {
                return Err(AlterConfigsError::Refused {
                    code: code.into(),
                    message: text(rd::rd_kafka_ConfigResource_error_string(r)),
                });
            }
        }
    }
    Ok(())
}
