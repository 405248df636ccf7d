//! The `log` import: a plugin's structured log lines, one line of the host's log each.

use crate::runtime::bindings::ankh::plugin::log;
use crate::runtime::bindings::types::LogLevel;
use crate::runtime::host::stdio::printable;
use crate::runtime::sandbox::store::HostState;

impl log::Host for HostState {
    /// One line per call, whatever the plugin wrote: newlines and other control characters
    /// are escaped (a plugin cannot forge a line of the host's log), and a message over
    /// [`GuestLimits::log_message_bytes`](crate::runtime::sandbox::guest_limits::GuestLimits::log_message_bytes) is cut, saying how long it was.
    fn log(&mut self, level: LogLevel, message: String, fields: Vec<(String, String)>) {
        if !self.tags.admit() {
            return;
        }
        let plugin = &**self.plugin();
        let request = format_args!("{:016x}", self.tags.request());
        let trace = self.tags.trace().map(|t| t.trace_hex());
        let cap = self.limits.log_message_bytes;
        let message = self.tags.mask(&message);
        let message = printable(&message, cap);
        let mut budget = cap;
        let fields = fields
            .iter()
            .map_while(|(k, v)| {
                let (k, v) = (self.tags.mask(k), self.tags.mask(v));
                let field = format!("{}={:?}", printable(&k, budget), printable(&v, budget));
                budget = budget.checked_sub(field.len())?;
                Some(field)
            })
            .collect::<Vec<_>>()
            .join(" ");
        match level {
            LogLevel::Trace => {
                tracing::trace!(target: "ankh::plugin", plugin, %request, trace, %fields, "{message}")
            }
            LogLevel::Debug => {
                tracing::debug!(target: "ankh::plugin", plugin, %request, trace, %fields, "{message}")
            }
            LogLevel::Info => {
                tracing::info!(target: "ankh::plugin", plugin, %request, trace, %fields, "{message}")
            }
            LogLevel::Warn => {
                tracing::warn!(target: "ankh::plugin", plugin, %request, trace, %fields, "{message}")
            }
            LogLevel::Error => {
                tracing::error!(target: "ankh::plugin", plugin, %request, trace, %fields, "{message}")
            }
        }
    }
}
