/// One symbolized frame: the function, the offset into it, the module (kernel module or mapped
/// file) where known, and the raw address only when asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Frame {
    pub(crate) function: String,
    pub(crate) offset: u64,
    pub(crate) module: Option<String>,
    pub(crate) address: Option<u64>,
}
