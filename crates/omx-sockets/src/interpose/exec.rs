//! exec: the carried connections a new image inherits go back to TCP first, then the
//! C library's function runs. `execl`, `execlp` and `execle` take their arguments as a
//! list (C variadics, which stable Rust cannot define): a small assembly entry lays the
//! list out as the `argv` array it already is, then the same path runs with the
//! vector form of the call (`execv`, `execvp`, `execve`).

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

/// Which list form called `exec_listed`.
#[cfg(target_arch = "x86_64")]
const EXECL: c_int = 0;
#[cfg(target_arch = "x86_64")]
const EXECLP: c_int = 1;
#[cfg(target_arch = "x86_64")]
const EXECLE: c_int = 2;

/// The list forms, once their arguments lie in memory in order: `args` is the
/// NULL-terminated argument list (so already an `argv`), and `execle`'s `envp` is the
/// word after its NULL.
///
/// # Safety
/// `args` points at a NULL-terminated list of C strings (followed by `envp` for
/// `EXECLE`), as the C caller of the list form must provide.
#[cfg(target_arch = "x86_64")]
unsafe extern "C" fn exec_listed(
    path: *const c_char,
    args: *const *const c_char,
    kind: c_int,
) -> c_int {
    before_exec();
    match kind {
        EXECLP => real::execvp(path, args),
        EXECLE => {
            let mut n = 0;
            while !(*args.add(n)).is_null() {
                n += 1;
            }
            let envp = *args.add(n + 1) as *const *const c_char;
            real::execve(path, args, envp)
        }
        _ => real::execv(path, args),
    }
}

/// The list forms' entries (x86-64 System V: the first six integer arguments arrive in
/// rdi, rsi, rdx, rcx, r8, r9, the rest on the stack above the return address). The
/// entry takes the return address off the stack and pushes r9, r8, rcx, rdx, rsi in
/// its place, so `arg0, ...` then lie as one array running on into the caller's stack
/// arguments; it calls `exec_listed(path, that array, kind)` (the stack 16-byte
/// aligned), and on return (the exec failed, errno set) restores the stack and returns
/// its result.
#[cfg(target_arch = "x86_64")]
macro_rules! list_entry {
    ($($name:ident = $kind:expr;)*) => {$(
        /// # Safety
        #[doc = concat!("As the C library's `", stringify!($name), "`.")]
        #[no_mangle]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                "pop r11",
                "push r9",
                "push r8",
                "push rcx",
                "push rdx",
                "push rsi",
                "mov rsi, rsp",
                "push r11",
                "mov edx, {kind}",
                "call {listed}",
                "pop r11",
                "add rsp, 40",
                "push r11",
                "ret",
                kind = const $kind,
                listed = sym exec_listed,
            )
        }
    )*};
}

#[cfg(target_arch = "x86_64")]
list_entry! {
    execl = EXECL;
    execlp = EXECLP;
    execle = EXECLE;
}
