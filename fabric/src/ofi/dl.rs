//! libfabric opened at run time (`dlopen`), so every build of the workspace — `cargo build`,
//! `cargo install`, libnrt.so — carries the transport without libfabric on the build machine,
//! and only a multi-process collective needs the library on the machine that runs it.
//!
//! Search order (the first library that opens and exports the calls wins):
//! 1. `NEURON_VFIO_LIBFABRIC`: a path to `libfabric.so*` or a directory holding
//!    `libfabric.so.1` (when set, nothing else is tried);
//! 2. the AWS EFA installer's `/opt/amazon/efa/lib` (and `lib64`): the efa provider on EC2;
//! 3. `scripts/fabric/setup.sh`'s prefix (`NEURON_VFIO_FABRIC_PREFIX`, default
//!    `/var/cache/neuron-vfio/libfabric-2.1`), `lib/libfabric.so.1`;
//! 4. `libfabric.so.1` through the dynamic loader's own search (`LD_LIBRARY_PATH`, the system
//!    library directories: Debian's `libfabric1` package).
//!
//! The library must report API [`MIN_VERSION`] or later (`fi_version()`).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::sys;
use crate::FabricError;

/// The oldest libfabric API accepted: 1.17, Debian 12's `libfabric1` (the oldest release the
/// transport was run against: there, reliable datagram endpoints over `tcp` are the rxm
/// utility provider layered on it, which the `tcp` provider filter selects; 1.18 and later
/// offer them in the `tcp` provider itself).
pub const MIN_VERSION: u32 = sys::fi_version(1, 17);
/// The API version the declarations of [`sys`] follow (requested when the library is at least
/// as new; an older library is asked for its own version).
pub const API_VERSION: u32 = sys::fi_version(2, 1);

/// Environment variable naming the libfabric library (or its directory) to use.
pub const LIBRARY_VAR: &str = "NEURON_VFIO_LIBFABRIC";
/// Environment variable of `scripts/fabric/setup.sh`'s install prefix.
pub const PREFIX_VAR: &str = "NEURON_VFIO_FABRIC_PREFIX";
/// `scripts/fabric/setup.sh`'s default prefix.
pub const DEFAULT_PREFIX: &str = "/var/cache/neuron-vfio/libfabric-2.1";
/// The EFA installer's library directories.
pub const EFA_DIRS: [&str; 2] = ["/opt/amazon/efa/lib", "/opt/amazon/efa/lib64"];

/// What to install when no library is found (part of the error message).
pub const INSTALL_HINT: &str = "install Debian's libfabric1 (apt-get install libfabric1), the AWS EFA installer \
     (/opt/amazon/efa) or libfabric 2.1 with scripts/fabric/setup.sh; \
     NEURON_VFIO_LIBFABRIC=/path/to/libfabric.so.1 picks one explicitly";

type GetInfo =
    unsafe extern "C" fn(u32, *const c_char, *const c_char, u64, *const sys::fi_info, *mut *mut sys::fi_info) -> c_int;
type FreeInfo = unsafe extern "C" fn(*mut sys::fi_info);
type DupInfo = unsafe extern "C" fn(*const sys::fi_info) -> *mut sys::fi_info;
type Fabric = unsafe extern "C" fn(*mut sys::fi_fabric_attr, *mut *mut sys::fid_fabric, *mut c_void) -> c_int;
type StrError = unsafe extern "C" fn(c_int) -> *const c_char;
type Version = unsafe extern "C" fn() -> u32;

/// The exported calls of one opened libfabric (the library stays loaded for the process's
/// life: objects of it may live in statics).
pub struct Api {
    /// Path of the library as opened.
    pub path: String,
    /// `fi_version()`: the library's API version.
    pub version: u32,
    pub(crate) getinfo: GetInfo,
    pub(crate) freeinfo: FreeInfo,
    pub(crate) dupinfo: DupInfo,
    pub(crate) fabric: Fabric,
    pub(crate) strerror: StrError,
}

impl Api {
    /// The API version to request from `fi_getinfo` / `fi_fabric`.
    pub fn request_version(&self) -> u32 {
        self.version.min(API_VERSION)
    }

    /// `major.minor` of the library.
    pub fn version_string(&self) -> String {
        format!("{}.{}", self.version >> 16, self.version & 0xffff)
    }

    /// `fi_strerror` of a (positive or negative) libfabric error number.
    pub fn strerror(&self, code: i64) -> String {
        let c = c_int::try_from(code.unsigned_abs()).unwrap_or(c_int::MAX);
        // SAFETY: fi_strerror returns a pointer to a static NUL-terminated string for any value.
        let p = unsafe { (self.strerror)(c) };
        if p.is_null() {
            return format!("error {code}");
        }
        // SAFETY: non-null, static, NUL-terminated (above).
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// The process's libfabric, opened on first use (the result, success or failure, is kept).
pub fn api() -> Result<&'static Api, FabricError> {
    static API: OnceLock<Result<Api, String>> = OnceLock::new();
    API.get_or_init(|| open(&candidates(|k| std::env::var_os(k).map(PathBuf::from))))
        .as_ref()
        .map_err(|e| FabricError::Unavailable(e.clone()))
}

/// The libraries to try, in order, for the environment `env`.
pub fn candidates(env: impl Fn(&str) -> Option<PathBuf>) -> Vec<PathBuf> {
    if let Some(p) = env(LIBRARY_VAR).filter(|p| !p.as_os_str().is_empty()) {
        return vec![if p.is_dir() { p.join("libfabric.so.1") } else { p }];
    }
    let mut v: Vec<PathBuf> = EFA_DIRS.iter().map(|d| Path::new(d).join("libfabric.so.1")).collect();
    let prefix = env(PREFIX_VAR).filter(|p| !p.as_os_str().is_empty()).unwrap_or_else(|| DEFAULT_PREFIX.into());
    v.push(prefix.join("lib").join("libfabric.so.1"));
    // A bare name: the dynamic loader's own search.
    v.push(PathBuf::from("libfabric.so.1"));
    v
}

fn open(cands: &[PathBuf]) -> Result<Api, String> {
    let mut tried = Vec::new();
    for c in cands {
        // Absolute paths that do not exist are skipped quietly (the usual case).
        if c.is_absolute() && !c.exists() {
            tried.push(format!("{} (absent)", c.display()));
            continue;
        }
        match open_one(c) {
            Ok(api) => {
                tracing::debug!("fabric: libfabric {} from {}", api.version_string(), api.path);
                return Ok(api);
            }
            Err(e) => tried.push(format!("{}: {e}", c.display())),
        }
    }
    Err(format!(
        "libfabric (libfabric.so.1, API {}.{} or later) is needed for collectives across processes or hosts \
         and none could be used: {INSTALL_HINT} (tried: {})",
        MIN_VERSION >> 16,
        MIN_VERSION & 0xffff,
        tried.join("; ")
    ))
}

fn dlerror() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string owned by the loader, valid until
    // the next dl* call on this thread; it is copied at once.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: non-null NUL-terminated string (above).
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

fn open_one(path: &Path) -> Result<Api, String> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| "path holds a NUL byte".to_string())?;
    // SAFETY: dlopen of a NUL-terminated path; running the library's constructors is what
    // loading it means. The handle is never closed (the library stays for the process's life).
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Err(dlerror());
    }
    let sym = |name: &CStr| -> Result<*mut c_void, String> {
        // SAFETY: `h` is a live handle; `name` is NUL-terminated.
        let p = unsafe { libc::dlsym(h, name.as_ptr()) };
        if p.is_null() {
            Err(format!("no symbol {}", name.to_string_lossy()))
        } else {
            Ok(p)
        }
    };
    // SAFETY: `fi_version` is the exported libfabric function of that name, whose C prototype
    // (fabric.h) is the function type it is cast to; so is each symbol transmuted below, to
    // its own prototype's type (fabric.h / fi_errno.h).
    let version: Version = unsafe { std::mem::transmute::<*mut c_void, Version>(sym(c"fi_version")?) };
    // SAFETY: fi_version takes no argument and only returns a number.
    let v = unsafe { version() };
    if v < MIN_VERSION {
        return Err(format!(
            "API {}.{} is older than {}.{}",
            v >> 16,
            v & 0xffff,
            MIN_VERSION >> 16,
            MIN_VERSION & 0xffff
        ));
    }
    // SAFETY: as above.
    let api = unsafe {
        Api {
            path: path.display().to_string(),
            version: v,
            getinfo: std::mem::transmute::<*mut c_void, GetInfo>(sym(c"fi_getinfo")?),
            freeinfo: std::mem::transmute::<*mut c_void, FreeInfo>(sym(c"fi_freeinfo")?),
            dupinfo: std::mem::transmute::<*mut c_void, DupInfo>(sym(c"fi_dupinfo")?),
            fabric: std::mem::transmute::<*mut c_void, Fabric>(sym(c"fi_fabric")?),
            strerror: std::mem::transmute::<*mut c_void, StrError>(sym(c"fi_strerror")?),
        }
    };
    Ok(api)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_override_alone_is_tried_and_a_directory_means_its_libfabric_so_1() {
        let dir = std::env::temp_dir();
        let c = candidates(|k| (k == LIBRARY_VAR).then(|| dir.clone()));
        assert_eq!(c, vec![dir.join("libfabric.so.1")]);
        let c = candidates(|k| (k == LIBRARY_VAR).then(|| PathBuf::from("/x/libfabric.so.1.27.0")));
        assert_eq!(c, vec![PathBuf::from("/x/libfabric.so.1.27.0")]);
    }

    #[test]
    fn default_order_is_efa_then_the_setup_prefix_then_the_loader_search() {
        let c = candidates(|k| (k == PREFIX_VAR).then(|| PathBuf::from("/p")));
        let want: Vec<PathBuf> = [
            "/opt/amazon/efa/lib/libfabric.so.1",
            "/opt/amazon/efa/lib64/libfabric.so.1",
            "/p/lib/libfabric.so.1",
            "libfabric.so.1",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(c, want);
        assert_eq!(candidates(|_| None)[2], Path::new(DEFAULT_PREFIX).join("lib/libfabric.so.1"));
    }

    #[test]
    fn nothing_usable_names_what_to_install_and_every_path_tried() {
        let missing = std::env::temp_dir().join("no-such-dir-for-libfabric/libfabric.so.1");
        let not_a_lib = std::env::current_exe().expect("exe");
        let e = match open(&[missing.clone(), not_a_lib.clone()]) {
            Ok(_) => panic!("opened a test binary as libfabric"),
            Err(e) => e,
        };
        assert!(e.contains("apt-get install libfabric1") && e.contains("EFA installer"), "{e}");
        assert!(e.contains(&missing.display().to_string()) && e.contains(&not_a_lib.display().to_string()), "{e}");
    }
}
