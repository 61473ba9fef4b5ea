//! NIXL calls the recording gives no meaning of its own (`query_memory`):
//! counted by method and status through the neutral call record
//! ([`nixl_agent::Observer::nixl_called`]), as the interposer counts the same
//! C++ method (a row of its table whose hook is `hooks::plain`). Under an
//! interposer that records, the Python side wraps none of them: each call is
//! counted once, there.

use crate::{guarded, instrument, running};
use nixl_agent::Hooked;
use nixl_agent_sys::interpose::{status, Sym};
use pyo3::prelude::*;

/// The method's name as the interposer's table spells it, when the table
/// counts it only by method and status; `None` for any other word, so no
/// free text becomes a label and no call with a record of its own is
/// counted twice.
fn plain_method(method: &str) -> Option<&'static str> {
    Sym::ALL
        .into_iter()
        .find(|s| s.plain() && s.name() == method)
        .map(Sym::name)
}

/// A call of NIXL's Python API that reached `method` of NIXL's agent (its
/// C++ name, `queryMem`) returned (`error` `None`: `NIXL_SUCCESS`) or raised
/// `error`, named by its class as NIXL's status
/// ([`instrument::status_of_exception`]); Python's own argument errors,
/// raised before NIXL is called, are not counted.
#[pyfunction]
#[pyo3(signature = (method, error=None))]
pub(crate) fn nixl_called(method: &str, error: Option<&Bound<'_, PyAny>>) {
    guarded(Hooked::NixlCall, || {
        let r = running()?;
        let method = plain_method(method)?;
        let status = match error {
            None => status::name(status::SUCCESS),
            Some(e) => {
                let class = e.get_type().name().ok()?;
                instrument::status_of_exception(class.to_str().ok()?)?
            }
        };
        r.observer().nixl_called(method, status);
        Some(())
    });
}

#[cfg(test)]
mod tests {
    use super::plain_method;

    #[test]
    fn only_the_tables_plain_methods_are_counted() {
        assert_eq!(plain_method("queryMem"), Some("queryMem"));
        assert_eq!(plain_method("registerMem"), None, "it has a record of its own");
        assert_eq!(plain_method("query_memory"), None);
        assert_eq!(plain_method(""), None);
    }
}
