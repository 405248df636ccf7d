//! A valid wasm32-wasip2 component that does not target the `ankh:plugin` world: it exports
//! nothing. The host must refuse it with a reason that names the missing export (acceptance 67).

/// Present so the crate is not empty; never exported.
pub fn nothing() -> u32 {
    42
}
