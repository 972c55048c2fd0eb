//! A scripted [`Transport`] for the unit tests of [`crate::durable`] and [`crate::process`]:
//! answers from a queue, and a record of what was asked (bodies too).

use std::collections::VecDeque;
use std::sync::Mutex;

use execseam_core::{BoxFuture, Error};

use crate::http::{Answer, Exchange, Method, Transport};

/// One request as sent: method, path, headers, body.
pub(crate) type Asked = (Method, String, Vec<(&'static str, String)>, Option<Vec<u8>>);

/// Answers from a script and records what was asked.
#[derive(Default)]
pub(crate) struct Script {
    pub(crate) answers: Mutex<VecDeque<Result<Answer, Error>>>,
    pub(crate) asked: Mutex<Vec<Asked>>,
}

impl Transport for Script {
    fn send(&self, ex: Exchange) -> BoxFuture<'_, Result<Answer, Error>> {
        self.asked
            .lock()
            .unwrap()
            .push((ex.method, ex.path, ex.headers, ex.body));
        let a = self
            .answers
            .lock()
            .unwrap()
            .pop_front()
            .expect("a scripted answer");
        Box::pin(async move { a })
    }
}

impl Script {
    pub(crate) fn push(&self, a: Result<Answer, Error>) {
        self.answers.lock().unwrap().push_back(a);
    }

    pub(crate) fn paths(&self) -> Vec<String> {
        self.asked
            .lock()
            .unwrap()
            .iter()
            .map(|a| a.1.clone())
            .collect()
    }
}

/// An answer of `status` with `headers` and `body`.
pub(crate) fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> Result<Answer, Error> {
    Ok(Answer {
        status,
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        body: body.as_bytes().to_vec().into(),
    })
}

/// A well-formed operation id.
pub(crate) const ID: &str = "op_0123456789abcdefghijklmnopqrstuv";
