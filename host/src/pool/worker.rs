//! One worker thread: take a job, find or create this worker's instance of the plugin, call it,
//! send the response. Nothing a plugin does can end this loop.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use crossbeam_channel::Receiver;

use crate::job::{Job, ReplyTx};
use crate::proto::{Version, header};
use crate::runtime::bindings::types;
use crate::runtime::call::{CallContext, Origin};
use crate::runtime::instance::Instance;

pub(super) struct Worker {
    reply: ReplyTx,
    /// This worker's instance of each plugin it has served, by plugin name.
    instances: HashMap<Arc<str>, Instance>,
    /// Reused for encoding responses.
    buf: Vec<u8>,
}

impl Worker {
    pub(super) fn new(reply: ReplyTx) -> Self {
        Worker {
            reply,
            instances: HashMap::new(),
            buf: Vec::with_capacity(4096),
        }
    }

    pub(super) fn run(mut self, rx: Receiver<Box<Job>>) {
        while let Ok(job) = rx.recv() {
            let origin = origin(&job);
            let plugin = job.plugin.name.clone();
            if catch_unwind(AssertUnwindSafe(|| self.serve(*job))).is_err() {
                // A bug in the host, not in the plugin: answer, forget the instance, carry on.
                tracing::error!(%plugin, "worker panicked while serving a request");
                self.instances.remove(&plugin);
                let mut call = CallContext::new(origin, plugin, self.reply.clone(), Vec::new());
                call.respond_error(500, "internal error in the ankh host");
            }
        }
    }

    fn serve(&mut self, job: Job) {
        let origin = origin(&job);
        let plugin = job.plugin.clone();
        let buf = std::mem::take(&mut self.buf);
        let mut call = CallContext::new(origin, plugin.name.clone(), self.reply.clone(), buf);

        // Reuse this worker's instance unless it belongs to an older version of the plugin.
        let stale = self
            .instances
            .get(&plugin.name)
            .is_some_and(|i| !Arc::ptr_eq(&i.plugin, &plugin));
        if stale {
            self.instances.remove(&plugin.name);
        }
        if !self.instances.contains_key(&plugin.name) {
            match Instance::new(plugin.clone()) {
                Ok(instance) => {
                    self.instances.insert(plugin.name.clone(), instance);
                }
                Err(e) => {
                    tracing::error!(
                        plugin = %plugin.name,
                        request = %format_args!("{:016x}", job.request_id),
                        "cannot instantiate: {e:?}"
                    );
                    let message = call.error_message("could not be instantiated");
                    call.respond_error(500, &message);
                    self.buf = call.into_buffer();
                    return;
                }
            }
        }
        let instance = self
            .instances
            .get_mut(&plugin.name)
            .expect("instance was just ensured");

        let request = to_wit(job);
        let (result, mut call) = instance.handle_request(&request, call);
        match result {
            Ok(types::Outcome::Respond(response)) => {
                let headers: Vec<_> = response
                    .headers
                    .into_iter()
                    .map(|h| (h.name, h.value))
                    .collect();
                // Refused (and logged) if the handler already responded early.
                let _ = call.respond(response.status, &headers, &response.body);
            }
            Ok(types::Outcome::Done) => {
                if !call.responded() {
                    tracing::error!(
                        plugin = %plugin.name,
                        request = %format_args!("{:016x}", call.request_id),
                        "handler returned without responding"
                    );
                    let message = call.error_message("returned without responding");
                    call.respond_error(500, &message);
                }
            }
            Ok(types::Outcome::Upgrade(_)) => {
                let message = call.error_message(
                    "asked for a WebSocket upgrade, which this host does not serve yet",
                );
                call.respond_error(501, &message);
            }
            Err(failure) => {
                self.instances.remove(&plugin.name);
                tracing::error!(
                    plugin = %plugin.name,
                    request = %format_args!("{:016x}", call.request_id),
                    "plugin `{}` {} (request {:016x}); instance discarded\n{}",
                    plugin.name,
                    failure.error,
                    call.request_id,
                    failure.report
                );
                let message = call.error_message(&failure.error.to_string());
                call.respond_error(failure.error.status(), &message);
            }
        }
        self.buf = call.into_buffer();
    }
}

fn origin(job: &Job) -> Origin {
    Origin {
        conn: job.conn,
        seq: job.seq,
        request_id: job.request_id,
        version: job.head.version,
        head: job.head.is_head(),
        keep_alive: job.head.keep_alive,
        accept_encoding: header(&job.head.headers, "accept-encoding").map(<[u8]>::to_vec),
    }
}

/// The WIT view of a request. Moves the headers and body, no copies.
fn to_wit(job: Job) -> types::Request {
    types::Request {
        id: format!("{:016x}", job.request_id),
        method: job.head.method,
        path: job.head.path,
        mount: job.mount.to_string(),
        query: job.head.query,
        headers: job
            .head
            .headers
            .into_iter()
            .map(|(name, value)| types::Header { name, value })
            .collect(),
        body: job.body,
        remote_addr: job.remote.to_string(),
        version: match job.head.version {
            Version::Http10 => types::HttpVersion::Http10,
            Version::Http11 => types::HttpVersion::Http11,
        },
    }
}
