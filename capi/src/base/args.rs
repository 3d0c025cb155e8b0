//! Arguments and out-parameters: required pointers, C strings in and out, malloc'd string
//! arrays.

use std::ffi::{c_char, CStr, CString};

use neff::NrtStatus;
use runtime::RtError;

use super::entry::err;

/// A required non-null argument.
pub(crate) fn need<T>(p: *const T, what: &str) -> Result<(), RtError> {
    if p.is_null() {
        Err(err(NrtStatus::Invalid, format!("{what} is NULL")))
    } else {
        Ok(())
    }
}

/// An optional C string (NULL → None).
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
pub(crate) unsafe fn opt_cstr(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null and, by this function's contract, NUL-terminated.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Store `v` through an out-pointer the caller checked non-null.
///
/// # Safety
/// `out` is non-null, aligned and writable.
pub(crate) unsafe fn put<T>(out: *mut T, v: T) {
    // SAFETY: by this function's contract.
    unsafe { out.write(v) }
}

/// `s` into a fixed C char array, truncated to fit, always NUL-terminated (when `dst` is
/// not empty).
pub(crate) fn copy_cstr(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.bytes().take(n)) {
        *d = b as c_char;
    }
    if let Some(d) = dst.get_mut(n) {
        *d = 0;
    }
}

/// A malloc'd array of malloc'd strings (freed by `free_string_array`).
pub(crate) fn string_array(items: &[&str], out: *mut *mut *const c_char, count: *mut usize) -> Result<(), RtError> {
    need(out, "array")?;
    need(count, "count")?;
    let oom = || err(NrtStatus::Resource, "out of host memory");
    // SAFETY: plain allocation, checked below.
    let arr = unsafe { libc::calloc(items.len().max(1), std::mem::size_of::<*const c_char>()) }.cast::<*const c_char>();
    if arr.is_null() {
        return Err(oom());
    }
    for (i, s) in items.iter().enumerate() {
        let c = CString::new(*s).map_err(|_| err(NrtStatus::Failure, "NUL in a name"))?;
        // SAFETY: `c` is NUL-terminated; strdup's result is checked.
        let d = unsafe { libc::strdup(c.as_ptr()) };
        if d.is_null() {
            // SAFETY: the first `i` entries are strdup'd strings and `arr` is ours.
            unsafe { free_string_array(arr, i) };
            return Err(oom());
        }
        // SAFETY: i < items.len() entries were allocated.
        unsafe { arr.add(i).write(d) };
    }
    // SAFETY: both checked non-null; writable per the headers.
    unsafe {
        put(out, arr);
        put(count, items.len());
    }
    Ok(())
}

/// Free a `string_array` result.
///
/// # Safety
/// `arr` is NULL or from `string_array` with `count` entries (or the caller's own
/// malloc'd array of malloc'd strings, as the headers allow).
pub(crate) unsafe fn free_string_array(arr: *mut *const c_char, count: usize) {
    if arr.is_null() {
        return;
    }
    for i in 0..count {
        // SAFETY: by this function's contract each entry is malloc'd or NULL.
        unsafe { libc::free(arr.add(i).read() as *mut libc::c_void) };
    }
    // SAFETY: as above.
    unsafe { libc::free(arr.cast()) };
}
