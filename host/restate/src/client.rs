//! Talking to Restate from outside: submitting a thread's run to the ingress, attaching to its
//! outcome, reading its recorded start, and registering a worker with the admin API. Plain
//! HTTP/1.1 with JSON bodies, whose text is kept as it came.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::protocol::{StartRecord, WORKFLOW_SERVICE, WorkflowInput};

/// Why a request to Restate failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The URL is not an `http://` URL.
    #[error("{0} is not an http:// URL of a Restate server")]
    InvalidUrl(String),
    /// Restate could not be reached, or the connection broke.
    #[error("cannot reach Restate at {url}: {message}")]
    Unreachable {
        /// The URL asked.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// Restate answered with an error status.
    #[error("Restate answered {status} to {url}: {body}")]
    Status {
        /// The URL asked.
        url: String,
        /// The status.
        status: u16,
        /// The body, as text.
        body: String,
    },
    /// Restate's answer is not the JSON expected.
    #[error("Restate's answer from {url} is not what flowbox expects: {message}")]
    BadAnswer {
        /// The URL asked.
        url: String,
        /// What is wrong with it.
        message: String,
    },
}

/// A client of one Restate server's ingress (or admin) API.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    http: HttpClient<HttpConnector, Full<Bytes>>,
}

/// How a submission went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submitted {
    /// The thread's run started now.
    Started,
    /// The thread already had a run (running or finished); nothing new started.
    Existing,
}

impl Client {
    /// A client of the server at `url` (`http://host:port`, a trailing `/` allowed).
    pub fn new(url: &str) -> Result<Self, ClientError> {
        let base = url.trim_end_matches('/');
        if !base.starts_with("http://") || base.len() <= "http://".len() {
            return Err(ClientError::InvalidUrl(url.to_owned()));
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(10)));
        let http = HttpClient::builder(TokioExecutor::new()).build(connector);
        Ok(Self {
            base: base.to_owned(),
            http,
        })
    }

    /// Submits `input` as thread `thread_id`'s run, without waiting for it.
    pub async fn submit(
        &self,
        thread_id: &str,
        input: &WorkflowInput,
    ) -> Result<Submitted, ClientError> {
        let body = serde_json::to_vec(input).expect("inputs serialise");
        let url = format!("{}/{WORKFLOW_SERVICE}/{thread_id}/run/send", self.base);
        let (status, text) = self.request(Method::POST, &url, Some(body)).await?;
        match status {
            StatusCode::CONFLICT => Ok(Submitted::Existing),
            status if status.is_success() => {
                let answer: Value = json(&url, &text)?;
                Ok(
                    if answer.get("status").and_then(Value::as_str) == Some("PreviouslyAccepted") {
                        Submitted::Existing
                    } else {
                        Submitted::Started
                    },
                )
            }
            status => Err(status_error(url, status, text)),
        }
    }

    /// Waits for thread `thread_id`'s outcome, as its workflow returned it; `None` when Restate
    /// knows no such thread.
    pub async fn attach(&self, thread_id: &str) -> Result<Option<Value>, ClientError> {
        let url = format!(
            "{}/restate/workflow/{WORKFLOW_SERVICE}/{thread_id}/attach",
            self.base
        );
        let (status, text) = self.request(Method::GET, &url, None).await?;
        match status {
            StatusCode::NOT_FOUND => Ok(None),
            status if status.is_success() => json(&url, &text).map(Some),
            status => Err(status_error(url, status, text)),
        }
    }

    /// Thread `thread_id`'s start as its journal recorded it; `None` before it started.
    pub async fn started(&self, thread_id: &str) -> Result<Option<StartRecord>, ClientError> {
        let url = format!("{}/{WORKFLOW_SERVICE}/{thread_id}/started", self.base);
        let (status, text) = self.request(Method::POST, &url, None).await?;
        if !status.is_success() {
            return Err(status_error(url, status, text));
        }
        json(&url, &text)
    }

    /// Thread `thread_id`'s published events with a sequence number above `after`.
    pub async fn events(
        &self,
        thread_id: &str,
        after: u64,
    ) -> Result<crate::events::EventsPage, ClientError> {
        let url = format!("{}/{WORKFLOW_SERVICE}/{thread_id}/events", self.base);
        let body = serde_json::to_vec(&crate::events::EventsQuery { after }).expect("serialises");
        let (status, text) = self.request(Method::POST, &url, Some(body)).await?;
        if !status.is_success() {
            return Err(status_error(url, status, text));
        }
        json(&url, &text)
    }

    /// Registers the deployment at `uri` with this (admin) server; registering the same code at
    /// the same URI again changes nothing.
    pub async fn register(&self, uri: &str) -> Result<Value, ClientError> {
        let url = format!("{}/deployments", self.base);
        let body = serde_json::to_vec(&serde_json::json!({ "uri": uri })).expect("serialises");
        let (status, text) = self.request(Method::POST, &url, Some(body)).await?;
        if !status.is_success() {
            return Err(status_error(url, status, text));
        }
        json(&url, &text)
    }

    async fn request(
        &self,
        method: Method,
        url: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, String), ClientError> {
        let unreachable = |message: String| ClientError::Unreachable {
            url: url.to_owned(),
            message,
        };
        let mut request = Request::builder().method(method).uri(url);
        if body.is_some() {
            request = request.header("content-type", "application/json");
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|error| ClientError::InvalidUrl(format!("{url} ({error})")))?;
        let response = self
            .http
            .request(request)
            .await
            .map_err(|error| unreachable(format!("{error:#}")))?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|error| unreachable(error.to_string()))?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
    }
}

fn json<T: serde::de::DeserializeOwned>(url: &str, text: &str) -> Result<T, ClientError> {
    serde_json::from_str(text).map_err(|error| ClientError::BadAnswer {
        url: url.to_owned(),
        message: error.to_string(),
    })
}

fn status_error(url: String, status: StatusCode, body: String) -> ClientError {
    ClientError::Status {
        url,
        status: status.as_u16(),
        body: body.chars().take(2000).collect(),
    }
}

/// A thread's events as its workflow published them, for a
/// [`Follower`](flowbox::events::history::Follower): Restate keeps what its buffer held, so a hole in
/// the numbering reaches the follower's reader as a gap. Whether the run has ended is not the
/// events handler's to say (the follower ends with `run_finished`, or when its caller, who
/// waits for the outcome, stops it).
#[flowbox::async_trait]
impl flowbox::events::history::HistorySource for Client {
    type Error = ClientError;

    async fn events_after(
        &self,
        thread_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<flowbox::Event>, ClientError> {
        let mut events = self.events(thread_id, after).await?.events;
        events.truncate(limit);
        Ok(events)
    }

    async fn state(
        &self,
        _thread_id: &str,
    ) -> Result<flowbox::events::history::RunState, ClientError> {
        Ok(flowbox::events::history::RunState::Open)
    }
}
