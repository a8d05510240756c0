//! An HTTP client of the runner's API (plain HTTP, reqwest).

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::api::{
    validate_job_id, CancelRequest, ErrorBody, JobDetail, JobSummary, ResumeRequest, SubmitRequest,
};
use super::RunnerError;

/// A client of one runner.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    /// A client of the runner at `base` (such as `http://127.0.0.1:7070`), sending
    /// `token` as `Authorization: Bearer` when given.
    pub fn new(base: &str, token: Option<String>) -> Self {
        // `host:port` (as in `<data-dir>/runner/address`) means plain HTTP.
        let base = base.trim_end_matches('/');
        let base = if base.contains("://") {
            base.to_string()
        } else {
            format!("http://{base}")
        };
        Client {
            base,
            token,
            http: reqwest::Client::new(),
        }
    }

    async fn send<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, RunnerError> {
        let req = match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        };
        let resp = req.send().await.map_err(|e| {
            RunnerError::Http(format!("cannot reach the runner at {}: {e}", self.base))
        })?;
        let status = resp.status();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| RunnerError::Http(format!("reading the runner's answer: {e}")))?;
        if !status.is_success() {
            let message = serde_json::from_slice::<ErrorBody>(&bytes)
                .map(|b| b.error)
                .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned());
            return Err(match status.as_u16() {
                400 => RunnerError::Invalid(message),
                401 => RunnerError::Unauthorized,
                // The runner's own 404s name what is missing ("no job x"); anything
                // else (a wrong path, another server) gets the URL.
                404 if message.starts_with("no job ") => RunnerError::Http(message),
                404 => RunnerError::Http(format!(
                    "{} answered 404 Not Found: is it a brook runner?",
                    self.base
                )),
                409 => RunnerError::Conflict(message),
                _ => RunnerError::Http(format!("the runner answered {status}: {message}")),
            });
        }
        serde_json::from_slice(&bytes).map_err(RunnerError::Json)
    }

    fn post<B: Serialize>(&self, path: &str, body: &B) -> reqwest::RequestBuilder {
        self.http.post(format!("{}{path}", self.base)).json(body)
    }

    /// `POST /jobs`.
    ///
    /// # Errors
    /// What the runner answered, or [`RunnerError::Http`].
    pub async fn submit(&self, req: &SubmitRequest) -> Result<JobDetail, RunnerError> {
        self.send(self.post("/jobs", req)).await
    }

    /// `GET /jobs`.
    ///
    /// # Errors
    /// As [`Client::submit`].
    pub async fn list(&self) -> Result<Vec<JobSummary>, RunnerError> {
        self.send(self.http.get(format!("{}/jobs", self.base)))
            .await
    }

    /// `GET /jobs/{id}`.
    ///
    /// # Errors
    /// As [`Client::submit`]; [`RunnerError::Invalid`] for a malformed id.
    pub async fn job(&self, id: &str) -> Result<JobDetail, RunnerError> {
        validate_job_id(id)?;
        self.send(self.http.get(format!("{}/jobs/{id}", self.base)))
            .await
    }

    /// `POST /jobs/{id}/cancel`.
    ///
    /// # Errors
    /// As [`Client::job`].
    pub async fn cancel(&self, id: &str, savepoint: bool) -> Result<JobDetail, RunnerError> {
        validate_job_id(id)?;
        self.send(self.post(&format!("/jobs/{id}/cancel"), &CancelRequest { savepoint }))
            .await
    }

    /// `POST /ui/links`: a one-time link into the dashboard, to the page `req` asks
    /// for; the full URL (this client's base and the link's path).
    ///
    /// # Errors
    /// As [`Client::job`].
    pub async fn ui_link(&self, req: &crate::ui::LinkRequest) -> Result<String, RunnerError> {
        if let Some(id) = &req.job {
            validate_job_id(id)?;
        }
        let link: crate::ui::LinkBody = self.send(self.post("/ui/links", req)).await?;
        Ok(format!("{}{}", self.base, link.path))
    }

    /// `POST /jobs/{id}/resume`.
    ///
    /// # Errors
    /// As [`Client::job`].
    pub async fn resume(&self, id: &str, req: &ResumeRequest) -> Result<JobDetail, RunnerError> {
        validate_job_id(id)?;
        self.send(self.post(&format!("/jobs/{id}/resume"), req))
            .await
    }
}
