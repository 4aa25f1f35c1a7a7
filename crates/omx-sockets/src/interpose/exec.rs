//! exec: the carried connections a new image inherits go back to TCP first, then the
//! C library's function runs. (`execl*` build their vector and call the C library's
//! internal execve, which no preload sees: programs that use them pass carried
//! connections on unchanged.)

use crate::real;
use crate::stream::handover::before_exec;
use libc::{c_char, c_int};

/// One wrapper per exec function, all of one shape: hand back, then call the real one
/// with the same arguments.
macro_rules! hand_back_then_exec {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        /// # Safety
        #[doc = concat!("As the C library's `", stringify!($name), "`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            before_exec();
            real::$name($($arg),*)
        }
    )*};
}

hand_back_then_exec! {
    execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char);
    execv(path: *const c_char, argv: *const *const c_char);
    execvp(file: *const c_char, argv: *const *const c_char);
    execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char);
    fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char);
}
