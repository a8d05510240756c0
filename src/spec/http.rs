//! The HTTP lookup of `async_enrich` steps: a GET of a URL made from the row's fields,
//! answered with a JSON object whose fields are added to the row.

use futures::future::BoxFuture;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::Value;

use brook_operators::async_enrich::AsyncLookup;
use brook_operators::row::Row;

/// GETs `url` with each `{field}` replaced by the row's field (percent-encoded).
#[derive(Debug, Clone)]
pub(crate) struct HttpLookup {
    pub(crate) url: String,
    pub(crate) client: reqwest::Client,
}

/// The `{field}` names of a URL template, in order.
pub(crate) fn template_fields(url: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut rest = url;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            return Err(format!("unclosed {{ in {url:?}"));
        };
        let name = &rest[open + 1..open + close];
        if name.is_empty() {
            return Err(format!("empty {{}} in {url:?}"));
        }
        fields.push(name.to_string());
        rest = &rest[open + close + 1..];
    }
    Ok(fields)
}

impl AsyncLookup for HttpLookup {
    fn key(&self, row: &Row) -> Result<String, String> {
        let mut url = self.url.clone();
        for f in template_fields(&self.url)? {
            let v = match row.get(&f) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => return Err(format!("the row has no field {f:?}")),
                Some(other) => other.to_string(),
            };
            let enc = utf8_percent_encode(&v, NON_ALPHANUMERIC).to_string();
            url = url.replacen(&format!("{{{f}}}"), &enc, 1);
        }
        Ok(url)
    }

    fn lookup(&self, key: String) -> BoxFuture<'static, Result<Row, String>> {
        let client = self.client.clone();
        Box::pin(async move {
            let resp = client
                .get(&key)
                .send()
                .await
                .map_err(|e| format!("GET {key}: {e}"))?;
            let status = resp.status();
            if !status.is_success() {
                return Err(format!("GET {key}: HTTP {status}"));
            }
            match resp.json::<Value>().await {
                Ok(v @ Value::Object(_)) => Ok(v),
                Ok(other) => Err(format!(
                    "GET {key}: the answer is not a JSON object: {other}"
                )),
                Err(e) => Err(format!("GET {key}: the answer is not JSON: {e}")),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_made_from_fields() {
        let l = HttpLookup {
            url: "http://h/s/{name}?id={id}".into(),
            client: reqwest::Client::new(),
        };
        let row = serde_json::json!({"name": "mia b/c", "id": 7});
        assert_eq!(l.key(&row).unwrap(), "http://h/s/mia%20b%2Fc?id=7");
        assert!(l.key(&serde_json::json!({"name": "x"})).is_err());
        assert!(template_fields("http://h/{x").is_err());
    }
}
