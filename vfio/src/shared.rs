//! One VFIO device, several processes: the process that opened it (the broker) hands the
//! others its descriptors over a unix socket, and each rebuilds the device with
//! [`crate::Device::from_fds`] / [`crate::VfioPlatform::from_fds`] — BARs mapped in its own
//! address space, DMA mapped by itself into the shared IOMMU address space inside its own
//! IOVA window. Nothing of the data path goes through the broker (DPDK's multi-process model).
//!
//! What is handed over: the device descriptor (an iommufd device cdev, or a no-IOMMU group's
//! device) and its address space (the iommufd and the IOAS id, or the no-IOMMU container and
//! group). A device opened through the legacy type1 container is not shareable this way (its
//! group descriptor lives inside `vfio-ioctls`): a broker opens devices through iommufd.
//!
//! The message ([`send_device`] / [`recv_device`]): its length (one byte, the descriptors
//! travel with it), `NVFD`, a version byte, the kind (1:
//! iommufd, 2: no-IOMMU), the IOAS id (u32, little-endian), the PCI address as text; the
//! descriptors in the order device, iommufd | container, group.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

use crate::error::{Error, Result};
use crate::fdpass;
use crate::sysfs::PciAddress;

/// The address space a shared device's DMA goes through.
#[derive(Debug)]
pub enum IommuFds {
    /// An iommufd and the id of the IOAS the device is attached to.
    Iommufd { iommufd: OwnedFd, ioas: u32 },
    /// No-IOMMU mode: the container (VFIO_NOIOMMU_IOMMU) and the group.
    NoIommu { container: OwnedFd, group: OwnedFd },
}

/// What a process needs to drive a device another process opened.
#[derive(Debug)]
pub struct DeviceFds {
    pub address: PciAddress,
    /// The VFIO device descriptor.
    pub device: OwnedFd,
    pub iommu: IommuFds,
}

const MAGIC: &[u8; 4] = b"NVFD";
const VERSION: u8 = 1;
const KIND_IOMMUFD: u8 = 1;
const KIND_NOIOMMU: u8 = 2;

/// Send `fds` over `sock` (the descriptors are duplicated into the receiver; the sender
/// keeps its own).
pub fn send_device(sock: &UnixStream, fds: &DeviceFds) -> Result<()> {
    let addr = fds.address.to_string();
    let (kind, ioas, rest) = match &fds.iommu {
        IommuFds::Iommufd { iommufd, ioas } => (KIND_IOMMUFD, *ioas, vec![iommufd.as_fd()]),
        IommuFds::NoIommu { container, group } => (KIND_NOIOMMU, 0, vec![container.as_fd(), group.as_fd()]),
    };
    let mut msg = Vec::with_capacity(11 + addr.len());
    msg.push(0);
    msg.extend_from_slice(MAGIC);
    msg.push(VERSION);
    msg.push(kind);
    msg.extend_from_slice(&ioas.to_le_bytes());
    msg.extend_from_slice(addr.as_bytes());
    msg[0] = u8::try_from(msg.len() - 1).map_err(|_| Error::BadHandoff(format!("address {addr} too long")))?;
    let mut all = vec![fds.device.as_fd()];
    all.extend(rest);
    fdpass::send_all_fds(sock, &msg, &all)?;
    Ok(())
}

/// Receive what [`send_device`] sent. A malformed message (wrong magic or version, unknown
/// kind, wrong descriptor count, bad address) is [`Error::BadHandoff`], and every descriptor
/// that came with it is closed.
pub fn recv_device(sock: &UnixStream) -> Result<DeviceFds> {
    let mut len = [0u8; 1];
    let (n, fds) = fdpass::recv_fds(sock, &mut len, 3)?;
    let bad = |why: String| Error::BadHandoff(why);
    if n == 0 {
        return Err(bad("the sender closed the socket".into()));
    }
    let mut buf = [0u8; 255];
    let msg = &mut buf[..len[0] as usize];
    std::io::Read::read_exact(&mut &*sock, msg).map_err(|e| bad(format!("message cut short: {e}")))?;
    let msg = &*msg;
    if msg.len() < 10 || &msg[..4] != MAGIC {
        return Err(bad(format!("not a device handoff ({n} bytes)")));
    }
    if msg[4] != VERSION {
        return Err(bad(format!("handoff version {} (this side speaks {VERSION})", msg[4])));
    }
    let ioas = u32::from_le_bytes([msg[6], msg[7], msg[8], msg[9]]);
    let address: PciAddress = std::str::from_utf8(&msg[10..])
        .map_err(|_| bad("the PCI address is not text".into()))?
        .parse()
        .map_err(|e: Error| bad(e.to_string()))?;
    let mut it = fds.into_iter();
    let (kind, count) = (msg[5], it.len());
    let iommu_and_device = match (kind, it.next(), it.next(), it.next()) {
        (KIND_IOMMUFD, Some(device), Some(iommufd), None) => Some((device, IommuFds::Iommufd { iommufd, ioas })),
        (KIND_NOIOMMU, Some(device), Some(container), Some(group)) => {
            Some((device, IommuFds::NoIommu { container, group }))
        }
        _ => None,
    };
    let (device, iommu) = iommu_and_device.ok_or_else(|| bad(format!("kind {kind} with {count} descriptors")))?;
    Ok(DeviceFds { address, device, iommu })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iova::IovaRange;
    use std::io::Write;

    fn memfd() -> OwnedFd {
        nix::sys::memfd::memfd_create(c"shared-test", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).unwrap()
    }

    #[test]
    fn a_handoff_round_trips_and_malformed_ones_are_refused() {
        let (a, b) = UnixStream::pair().unwrap();
        let address: PciAddress = "0000:00:1e.0".parse().unwrap();
        let sent = DeviceFds { address, device: memfd(), iommu: IommuFds::Iommufd { iommufd: memfd(), ioas: 7 } };
        send_device(&a, &sent).unwrap();
        let got = recv_device(&b).unwrap();
        assert_eq!(got.address, address);
        assert!(matches!(got.iommu, IommuFds::Iommufd { ioas: 7, .. }));
        // The same open files: a write through the sender's descriptor is seen through the
        // receiver's.
        std::fs::File::from(sent.device.try_clone().unwrap()).write_all(b"abc").unwrap();
        assert_eq!(nix::sys::stat::fstat(&got.device).unwrap().st_size, 3);
        let noiommu =
            DeviceFds { address, device: memfd(), iommu: IommuFds::NoIommu { container: memfd(), group: memfd() } };
        send_device(&a, &noiommu).unwrap();
        assert!(matches!(recv_device(&b).unwrap().iommu, IommuFds::NoIommu { .. }));
        // Wrong magic, wrong version, too few descriptors for the kind.
        for body in [
            &b"XXXX\x01\x01\0\0\0\x0000:01.0"[..],
            b"NVFD\x09\x01\0\0\0\x0000:01.0",
            b"NVFD\x01\x02\0\0\0\x0000:01.0",
            b"NVFD\x01\x01\0\0\0\x00nonsense",
            b"NVFD\x01\x07\0\0\0\x0000:01.0",
        ] {
            let mut bytes = vec![body.len() as u8];
            bytes.extend_from_slice(body);
            let f: Vec<OwnedFd> = (0..2).map(|_| memfd()).collect();
            let borrowed: Vec<_> = f.iter().map(|f| f.as_fd()).collect();
            fdpass::send_fds(&a, &bytes, &borrowed).unwrap();
            let e = recv_device(&b).unwrap_err();
            assert!(matches!(e, Error::BadHandoff(_)), "{e}");
        }
        // A message cut short by the sender closing.
        fdpass::send_fds(&a, b"\x20NVFD", &[]).unwrap();
        drop(a);
        assert!(matches!(recv_device(&b), Err(Error::BadHandoff(_))));
    }

    #[test]
    fn descriptors_that_are_not_a_vfio_device_are_an_error() {
        // From a broker that sent the wrong things: the device query fails cleanly (the
        // address space's descriptors are closed with it, not destroyed in anyone's IOMMU).
        let fds = DeviceFds {
            address: "0000:00:1e.0".parse().unwrap(),
            device: memfd(),
            iommu: IommuFds::NoIommu { container: memfd(), group: memfd() },
        };
        let e = crate::Device::from_fds(fds, IovaRange { start: 1 << 32, last: (2 << 32) - 1 }).unwrap_err();
        assert!(e.to_string().contains("VFIO_DEVICE_GET_INFO"), "{e}");
    }
}
