//! `omx_sockets CMD ARGS...`: runs CMD with libomx_sockets.so preloaded.

const USAGE: &str = "usage: omx_sockets CMD [ARGS...]\n\
Runs CMD with libomx_sockets.so preloaded: its TCP connections to peers that run the\n\
library too are carried on omx, everything else stays on the kernel.\n\
OMX_SOCKETS_LIB names the library (default: beside this program, then ../lib).\n\
OMX_SOCKETS_VERBOSE=1 reports each carried connection on stderr.";

fn main() {
    omx_runtime::preload::launch("omx_sockets", "libomx_sockets.so", "OMX_SOCKETS_LIB", USAGE)
}
