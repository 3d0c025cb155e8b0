//! Host memory shared with a device, and its IOVA mappings.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Page size backing a [`HostMem`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageSize {
    /// 4 KiB base pages.
    Base4K,
    /// 2 MiB hugepages (MAP_HUGETLB | MAP_HUGE_2MB).
    Huge2M,
    /// 1 GiB hugepages (MAP_HUGETLB | MAP_HUGE_1GB).
    Huge1G,
}

impl PageSize {
    /// Bytes per page.
    pub fn bytes(self) -> usize {
        match self {
            PageSize::Base4K => 4096,
            PageSize::Huge2M => 2 << 20,
            PageSize::Huge1G => 1 << 30,
        }
    }

    /// log2 of [`PageSize::bytes`].
    pub fn shift(self) -> u8 {
        self.bytes().trailing_zeros() as u8
    }
}

/// Host memory allocation failures.
#[derive(Debug, thiserror::Error)]
pub enum HostMemError {
    #[error("cannot allocate an empty buffer")]
    Empty,
    #[error("mmap of {len} bytes ({page:?} pages) failed: {source}")]
    Mmap { len: usize, page: PageSize, source: std::io::Error },
    #[error("access at {offset:#x}+{len} is outside the buffer of {size} bytes")]
    OutOfRange { offset: usize, len: usize, size: usize },
    #[error("offset {offset:#x} is not aligned to {align}")]
    Misaligned { offset: usize, align: usize },
    #[error("shareable memory (memfd) of {len} bytes: {source}")]
    Memfd { len: usize, source: std::io::Error },
    #[error("another process's memory: {0}")]
    Foreign(String),
}

/// Checks memory another process handed over by descriptor before this process maps
/// `[offset, offset + len)` of it: the descriptor must be a memfd sealed against shrinking
/// (`F_SEAL_SHRINK`) whose size covers the range. A mapping of a file that its owner may
/// truncate turns every later access past the new end into SIGBUS in the process that maps
/// it, so memory from an untrusted process is accepted only when it can no longer shrink.
/// [`HostMem::alloc_shared`] seals its memfds so; QEMU's `memory-backend-memfd` seals guest
/// RAM (its `seal` property, on by default).
pub fn check_foreign_memory(fd: BorrowedFd<'_>, offset: u64, len: u64) -> Result<(), HostMemError> {
    use nix::fcntl::{fcntl, FcntlArg, SealFlag};
    let foreign = |m: String| HostMemError::Foreign(m);
    let seals = match fcntl(fd, FcntlArg::F_GET_SEALS) {
        Ok(bits) => SealFlag::from_bits_truncate(bits),
        Err(nix::errno::Errno::EINVAL) => {
            return Err(foreign("not a memfd (memory shared with a device must be a sealed memfd)".into()))
        }
        Err(e) => return Err(foreign(format!("its seals: {e}"))),
    };
    if !seals.contains(SealFlag::F_SEAL_SHRINK) {
        return Err(foreign("a memfd not sealed against shrinking (F_SEAL_SHRINK)".into()));
    }
    let st = nix::sys::stat::fstat(fd).map_err(|e| foreign(format!("fstat: {e}")))?;
    let size = u64::try_from(st.st_size).unwrap_or(0);
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(foreign(format!("{len:#x} bytes at offset {offset:#x} of a memfd of {size:#x} bytes"))),
    }
}

/// Page-aligned memory that a device may read and write by DMA: anonymous (private to this
/// process; [`HostMem::alloc`]) or shareable (a memfd mapped shared, whose descriptor another
/// process can map too; [`HostMem::alloc_shared`] — what a device served by another process,
/// over vfio-user, needs).
///
/// All accessors are bounds-checked and use raw copies or atomics, because the
/// device may access the memory concurrently.
///
/// The mapping is a [`memmap2::MmapRaw`]: it hands out raw pointers only (no `&[u8]` that
/// the device could change underneath), is `Send + Sync`, and is unmapped on drop.
pub struct HostMem {
    map: memmap2::MmapRaw,
    page: PageSize,
    /// The memfd behind a shareable buffer (`None`: anonymous memory).
    fd: Option<OwnedFd>,
}

impl HostMem {
    /// Allocate `len` bytes (rounded up to whole pages) of zeroed memory, trying
    /// 1 GiB pages for ≥ 1 GiB buffers, 2 MiB pages for ≥ 2 MiB buffers, then 4 KiB.
    pub fn alloc(len: usize) -> Result<Self, HostMemError> {
        if len >= PageSize::Huge1G.bytes() {
            if let Ok(m) = Self::alloc_with(len, PageSize::Huge1G) {
                return Ok(m);
            }
        }
        if len >= PageSize::Huge2M.bytes() {
            if let Ok(m) = Self::alloc_with(len, PageSize::Huge2M) {
                return Ok(m);
            }
        }
        Self::alloc_with(len, PageSize::Base4K)
    }

    /// Allocate `len` bytes backed by pages of exactly `page` size.
    pub fn alloc_with(len: usize, page: PageSize) -> Result<Self, HostMemError> {
        if len == 0 {
            return Err(HostMemError::Empty);
        }
        let pb = page.bytes();
        let rounded = len.checked_add(pb - 1).map(|v| v / pb * pb).ok_or(HostMemError::Mmap {
            len,
            page,
            source: std::io::Error::from(nix::errno::Errno::ENOMEM),
        })?;
        // A private anonymous read-write mapping (MAP_PRIVATE | MAP_ANONYMOUS).
        let mut opts = memmap2::MmapOptions::new();
        opts.len(rounded);
        match page {
            // Base pages are reserved lazily (sparse device models rely on it). Hugepages
            // must be reserved at mmap time: with MAP_NORESERVE an empty pool would turn
            // the first touch into SIGBUS instead of a clean mmap failure.
            PageSize::Base4K => opts.no_reserve_swap(),
            // MAP_HUGETLB with the page size's log2 in the MAP_HUGE_SHIFT field.
            PageSize::Huge2M | PageSize::Huge1G => opts.huge(Some(page.shift())),
        };
        let map = opts.map_anon().map_err(|source| HostMemError::Mmap { len: rounded, page, source })?;
        Ok(Self { map: map.into(), page, fd: None })
    }

    /// Allocate `len` bytes (rounded up to 4 KiB pages) of zeroed, shareable memory: a memfd,
    /// mapped shared here, whose descriptor ([`HostMem::shared_fd`]) another process maps to
    /// reach the same pages. Base pages only (the memfd's pages are reserved lazily, as the
    /// anonymous path's base pages).
    pub fn alloc_shared(len: usize) -> Result<Self, HostMemError> {
        if len == 0 {
            return Err(HostMemError::Empty);
        }
        let page = PageSize::Base4K;
        let pb = page.bytes();
        let memfd_err = |source: std::io::Error| HostMemError::Memfd { len, source };
        let rounded = len
            .checked_add(pb - 1)
            .map(|v| v / pb * pb)
            .ok_or_else(|| memfd_err(std::io::Error::from(nix::errno::Errno::ENOMEM)))?;
        let size = i64::try_from(rounded).map_err(|_| memfd_err(std::io::Error::from(nix::errno::Errno::EFBIG)))?;
        let fd = nix::sys::memfd::memfd_create(
            c"neuron-vfio-dma",
            nix::sys::memfd::MFdFlags::MFD_CLOEXEC | nix::sys::memfd::MFdFlags::MFD_ALLOW_SEALING,
        )
        .map_err(|e| memfd_err(e.into()))?;
        nix::unistd::ftruncate(&fd, size).map_err(|e| memfd_err(e.into()))?;
        // Its size is fixed for good: the process that maps it ([`check_foreign_memory`]) can
        // then touch every byte it mapped without a SIGBUS, whatever this process does later.
        let seals = nix::fcntl::SealFlag::F_SEAL_SHRINK | nix::fcntl::SealFlag::F_SEAL_GROW;
        nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_ADD_SEALS(seals)).map_err(|e| memfd_err(e.into()))?;
        let map = memmap2::MmapOptions::new().len(rounded).map_raw(&fd).map_err(|source| HostMemError::Mmap {
            len: rounded,
            page,
            source,
        })?;
        Ok(Self { map, page, fd: Some(fd) })
    }

    /// The memfd of a shareable buffer ([`HostMem::alloc_shared`]); `None` for anonymous
    /// memory. Byte 0 of the buffer is at offset 0 of the file.
    pub fn shared_fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(|f| f.as_fd())
    }

    /// Length in bytes (whole pages).
    #[inline]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Always false: empty buffers cannot be allocated.
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// Page size backing this buffer.
    pub fn page_size(&self) -> PageSize {
        self.page
    }

    /// Host virtual address (for the kernel's DMA map call or a simulator's IOMMU).
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    #[inline]
    fn check(&self, offset: usize, len: usize) -> Result<(), HostMemError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(HostMemError::OutOfRange { offset, len, size: self.len() }),
        }
    }

    /// Copy `buf.len()` bytes out of the buffer at `offset`.
    #[inline]
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<(), HostMemError> {
        self.check(offset, buf.len())?;
        std::sync::atomic::fence(Ordering::Acquire);
        // SAFETY: range checked above; `buf` is a distinct Rust allocation.
        unsafe { std::ptr::copy_nonoverlapping(self.as_ptr().add(offset), buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Copy `data` into the buffer at `offset`.
    #[inline]
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), HostMemError> {
        self.check(offset, data.len())?;
        // SAFETY: range checked above; `data` is a distinct Rust allocation.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.as_ptr().add(offset), data.len()) };
        std::sync::atomic::fence(Ordering::Release);
        Ok(())
    }

    /// Fill `len` bytes at `offset` with `byte`.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), HostMemError> {
        self.check(offset, len)?;
        // SAFETY: range checked above.
        unsafe { std::ptr::write_bytes(self.as_ptr().add(offset), byte, len) };
        std::sync::atomic::fence(Ordering::Release);
        Ok(())
    }

    /// Atomic view of the aligned 32-bit word at `offset` (for polling words the
    /// device writes, such as completion markers).
    #[inline]
    pub fn atomic_u32(&self, offset: usize) -> Result<&AtomicU32, HostMemError> {
        self.check(offset, 4)?;
        if !offset.is_multiple_of(4) {
            return Err(HostMemError::Misaligned { offset, align: 4 });
        }
        // SAFETY: in range, 4-aligned (the mapping is page aligned), lives as long as &self.
        Ok(unsafe { AtomicU32::from_ptr(self.as_ptr().add(offset) as *mut u32) })
    }

    /// Atomic view of the aligned 64-bit word at `offset`.
    #[inline]
    pub fn atomic_u64(&self, offset: usize) -> Result<&AtomicU64, HostMemError> {
        self.check(offset, 8)?;
        if !offset.is_multiple_of(8) {
            return Err(HostMemError::Misaligned { offset, align: 8 });
        }
        // SAFETY: in range, 8-aligned, lives as long as &self.
        Ok(unsafe { AtomicU64::from_ptr(self.as_ptr().add(offset) as *mut u64) })
    }

    /// Read a little-endian u32 at `offset` (any alignment).
    #[inline]
    pub fn read_u32(&self, offset: usize) -> Result<u32, HostMemError> {
        let mut b = [0u8; 4];
        self.read(offset, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Write a little-endian u32 at `offset` (any alignment).
    #[inline]
    pub fn write_u32(&self, offset: usize, v: u32) -> Result<(), HostMemError> {
        self.write(offset, &v.to_le_bytes())
    }

    /// Read a little-endian u64 at `offset` (any alignment).
    #[inline]
    pub fn read_u64(&self, offset: usize) -> Result<u64, HostMemError> {
        let mut b = [0u8; 8];
        self.read(offset, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Write a little-endian u64 at `offset` (any alignment).
    #[inline]
    pub fn write_u64(&self, offset: usize, v: u64) -> Result<(), HostMemError> {
        self.write(offset, &v.to_le_bytes())
    }
}

impl std::fmt::Debug for HostMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostMem")
            .field("ptr", &self.as_ptr())
            .field("len", &self.len())
            .field("page", &self.page)
            .field("shared", &self.fd.is_some())
            .finish()
    }
}

/// Direction of device access to a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmaDir {
    /// The device only reads (host → device).
    ToDevice,
    /// The device only writes (device → host).
    FromDevice,
    /// The device reads and writes.
    Bidirectional,
}

bitflags::bitflags! {
    /// What a device may do with a DMA mapping: the permission set an IOMMU mapping grants.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct DmaPerm: u8 {
        /// The device may read the memory (host → device transfers).
        const READ = 1 << 0;
        /// The device may write the memory (device → host transfers).
        const WRITE = 1 << 1;
    }
}

impl DmaDir {
    /// The permissions the device needs for this direction.
    pub fn perm(self) -> DmaPerm {
        match self {
            DmaDir::ToDevice => DmaPerm::READ,
            DmaDir::FromDevice => DmaPerm::WRITE,
            DmaDir::Bidirectional => DmaPerm::READ | DmaPerm::WRITE,
        }
    }
    /// Whether the device may read the mapping.
    pub fn device_reads(self) -> bool {
        self.perm().contains(DmaPerm::READ)
    }
    /// Whether the device may write the mapping.
    pub fn device_writes(self) -> bool {
        self.perm().contains(DmaPerm::WRITE)
    }
}

/// Undoes a DMA mapping; implemented by each platform backend.
pub trait DmaUnmap: Send + Sync {
    /// Remove the IOVA range `[iova, iova + len)` from the device's address space.
    fn unmap(&self, iova: u64, len: u64);
}

/// Host memory mapped at an IOVA. Dropping it unmaps the IOVA range first and
/// frees the memory after, so a device can never reach freed memory.
pub struct DmaMapping {
    // Field order matters only for documentation; Drop does the sequencing.
    mem: Option<HostMem>,
    iova: u64,
    dir: DmaDir,
    unmapper: Arc<dyn DmaUnmap>,
}

impl DmaMapping {
    /// Construct (for platform backends): `mem` is now visible at `iova`.
    pub fn new(mem: HostMem, iova: u64, dir: DmaDir, unmapper: Arc<dyn DmaUnmap>) -> Self {
        Self { mem: Some(mem), iova, dir, unmapper }
    }
    /// Device-visible address of byte 0.
    #[inline]
    pub fn iova(&self) -> u64 {
        self.iova
    }
    /// Mapped length in bytes.
    pub fn len(&self) -> usize {
        self.mem().len()
    }
    /// Always false.
    pub fn is_empty(&self) -> bool {
        false
    }
    /// Access direction granted to the device.
    pub fn dir(&self) -> DmaDir {
        self.dir
    }
    /// The host memory.
    #[inline]
    pub fn mem(&self) -> &HostMem {
        // Only None during drop.
        match &self.mem {
            Some(m) => m,
            None => unreachable!("DmaMapping used during drop"),
        }
    }
}

impl Drop for DmaMapping {
    fn drop(&mut self) {
        if let Some(mem) = self.mem.take() {
            self.unmapper.unmap(self.iova, mem.len() as u64);
            drop(mem);
        }
    }
}

impl std::fmt::Debug for DmaMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaMapping")
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("mem", &self.mem)
            .field("dir", &self.dir)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn shareable_memory_is_sealed_so_another_process_may_map_it() {
        let m = HostMem::alloc_shared(5000).unwrap();
        let fd = m.shared_fd().unwrap();
        check_foreign_memory(fd, 0, 8192).unwrap();
        check_foreign_memory(fd, 4096, 4096).unwrap();
        assert!(check_foreign_memory(fd, 4096, 8192).is_err(), "past its end");
        assert!(check_foreign_memory(fd, u64::MAX, 1).is_err(), "overflow");
        assert!(nix::unistd::ftruncate(fd, 0).is_err(), "it shrank");
        assert!(nix::unistd::ftruncate(fd, 1 << 20).is_err(), "it grew");
        m.write(8191, b"z").unwrap();
    }

    #[test]
    fn hostmem_rw_and_bounds() {
        let m = HostMem::alloc(100).unwrap();
        assert_eq!(m.len(), 4096);
        m.write(10, b"hello").unwrap();
        let mut b = [0u8; 5];
        m.read(10, &mut b).unwrap();
        assert_eq!(&b, b"hello");
        assert!(m.write(4094, b"abc").is_err());
        assert!(m.read(usize::MAX, &mut b).is_err());
        m.write_u64(16, 0xABCD_EF01).unwrap();
        assert_eq!(m.atomic_u64(16).unwrap().load(Ordering::Acquire), 0xABCD_EF01);
        assert!(m.atomic_u32(18).is_err());
        assert!(HostMem::alloc(0).is_err());
    }

    #[test]
    fn directions_grant_permissions() {
        assert_eq!(DmaDir::ToDevice.perm(), DmaPerm::READ);
        assert_eq!(DmaDir::FromDevice.perm(), DmaPerm::WRITE);
        assert_eq!(DmaDir::Bidirectional.perm(), DmaPerm::all());
        assert!(DmaDir::ToDevice.device_reads() && !DmaDir::ToDevice.device_writes());
        assert!(!DmaDir::FromDevice.device_reads() && DmaDir::FromDevice.device_writes());
    }

    #[test]
    fn hugepage_buffers_are_whole_pages_or_a_clean_error() {
        assert_eq!((PageSize::Base4K.shift(), PageSize::Huge2M.shift(), PageSize::Huge1G.shift()), (12, 21, 30));
        // The hugepage pool may be empty here: then mmap fails cleanly (no SIGBUS later).
        match HostMem::alloc_with(100, PageSize::Huge2M) {
            Ok(m) => {
                assert_eq!(m.len(), 2 << 20);
                assert_eq!(m.as_ptr() as usize % (2 << 20), 0);
                m.write_u32(m.len() - 4, 0x1234_5678).unwrap();
                assert_eq!(m.read_u32(m.len() - 4).unwrap(), 0x1234_5678);
            }
            Err(e) => assert!(matches!(e, HostMemError::Mmap { len: 0x20_0000, page: PageSize::Huge2M, .. }), "{e}"),
        }
        // Fresh base pages read as zero.
        let m = HostMem::alloc_with(3 * 4096 + 1, PageSize::Base4K).unwrap();
        assert_eq!(m.len(), 4 * 4096);
        assert_eq!(m.read_u64(4 * 4096 - 8).unwrap(), 0);
        assert!(matches!(HostMem::alloc_with(usize::MAX, PageSize::Huge2M), Err(HostMemError::Mmap { .. })));
    }

    #[test]
    fn shared_buffers_are_one_memory_through_their_fd() {
        assert!(matches!(HostMem::alloc_shared(0), Err(HostMemError::Empty)));
        let m = HostMem::alloc_shared(5000).unwrap();
        assert_eq!((m.len(), m.page_size()), (8192, PageSize::Base4K));
        assert_eq!(m.read_u64(8184).unwrap(), 0, "fresh memory reads as zero");
        m.write_u32(4096, 0xfeed_f00d).unwrap();
        // A second mapping of the descriptor (what another process does) sees the same bytes,
        // and its writes are seen here.
        let fd = m.shared_fd().expect("a shareable buffer has a descriptor");
        let other = memmap2::MmapOptions::new().len(8192).map_raw(&fd).unwrap();
        // SAFETY: in range of the 8 KiB mapping, aligned; the test is the only user.
        let word = unsafe { AtomicU32::from_ptr(other.as_mut_ptr().add(4096) as *mut u32) };
        assert_eq!(word.load(Ordering::Acquire), 0xfeed_f00d);
        word.store(7, Ordering::Release);
        assert_eq!(m.read_u32(4096).unwrap(), 7);
        assert!(HostMem::alloc(100).unwrap().shared_fd().is_none(), "anonymous memory has none");
        assert!(matches!(HostMem::alloc_shared(usize::MAX), Err(HostMemError::Memfd { .. })));
    }

    struct Rec(Mutex<Vec<(u64, u64)>>);
    impl DmaUnmap for Rec {
        fn unmap(&self, iova: u64, len: u64) {
            self.0.lock().unwrap().push((iova, len));
        }
    }

    #[test]
    fn mapping_unmaps_on_drop() {
        let rec = Arc::new(Rec(Mutex::new(vec![])));
        let m = DmaMapping::new(HostMem::alloc(8192).unwrap(), 0x10000, DmaDir::Bidirectional, rec.clone());
        assert_eq!(m.iova(), 0x10000);
        drop(m);
        assert_eq!(rec.0.lock().unwrap().as_slice(), &[(0x10000, 8192)]);
    }
}
