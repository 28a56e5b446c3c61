/// One symbolized frame: the function, the offset into it, the module (kernel module or mapped
/// file) where known, and the raw address only when asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub function: String,
    pub offset: u64,
    pub module: Option<String>,
    pub address: Option<u64>,
}
