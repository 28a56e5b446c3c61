use fdprof_figures::BuildId;

/// One symbolized frame: the function, the offset into it, the module (kernel module or mapped
/// file) where known, and the raw address only when asked for. User frames in a mapped file
/// also carry the file's build id and the address's offset in the file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Frame {
    pub(crate) function: String,
    pub(crate) offset: u64,
    pub(crate) module: Option<String>,
    pub(crate) address: Option<u64>,
    pub(crate) build_id: Option<BuildId>,
    pub(crate) file_offset: Option<u64>,
}
