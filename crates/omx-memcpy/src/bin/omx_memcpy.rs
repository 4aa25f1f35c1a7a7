//! `omx_memcpy CMD ARGS...`: runs CMD with libomx_memcpy.so preloaded.

const USAGE: &str = "usage: omx_memcpy CMD [ARGS...]\n\
Runs CMD with libomx_memcpy.so preloaded: its memcpy/memmove calls of at least\n\
OMX_MEMCPY_MIN bytes (default 4 MiB) return once posted to the copy service\n\
(omx_copyd, else a copy thread); the destination is protected until the copy is done.\n\
OMX_MEMCPY_LIB names the library (default: beside this program, then ../lib).\n\
OMX_MEMCPY_STATS=1 prints what was copied asynchronously on exit.";

fn main() {
    omx_runtime::preload::launch("omx_memcpy", "libomx_memcpy.so", "OMX_MEMCPY_LIB", USAGE)
}
