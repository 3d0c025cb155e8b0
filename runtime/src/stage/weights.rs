//! Weights streamed into device memory while the NEFF is read ([`neff::Neff::parse_streaming`]):
//! [`DeviceSink`] takes each large `.npy` member as it leaves the inflater and writes it
//! into a device allocation through the DMA path, double-buffered — the reader fills one
//! bounce buffer while a DMA thread copies the other into device memory — so host memory
//! holds two bounce buffers whatever the size of the model. [`vars::place_vars`] then takes a
//! streamed member's allocation as the var's memory (or copies it, device to device, when the
//! var lands elsewhere).
//!
//! A member's allocation is not zeroed first ([`Device::alloc_device_for_overwrite`]): the
//! stream writes every byte of it, and [`MemberSink::end`] zeroes what it did not write (the
//! one byte of an empty member's allocation), so nothing stale is ever handed out. A sink
//! dropped without [`DeviceSink::commit`] (the load failed: a short member, a refused digest,
//! a later check) zeroes everything it still holds before freeing it.
//!
//! [`vars::place_vars`]: super::vars::place_vars

use std::collections::HashMap;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;

use hal::{DevBuf, Device, HalError, HostBuf, Xfer};
use neff::{MemberSink, NrtStatus, SinkError};

/// Members at least this large are streamed (smaller ones stay in the payload buffer).
pub const STREAM_MIN: u64 = 1 << 20;
/// Bytes per bounce buffer (two are used).
pub const BOUNCE: usize = 4 << 20;
/// Alignment of a streamed member's allocation.
const MEMBER_ALIGN: u64 = 4096;

struct Job {
    buf: HostBuf,
    dst: u64,
    len: usize,
}

/// The DMA side of the double buffer: a thread copying filled bounce buffers to device memory.
struct Pipe {
    tx: Option<Sender<Job>>,
    back: Receiver<(HostBuf, Result<(), HalError>)>,
    thread: Option<JoinHandle<()>>,
    in_flight: usize,
}

impl Pipe {
    fn new(dev: &Device, nc: usize) -> Self {
        let (tx, rx) = channel::<Job>();
        let (btx, back) = channel();
        let d = dev.clone();
        let thread = std::thread::Builder::new()
            .name("neff-weights-dma".into())
            .spawn(move || {
                for j in rx {
                    let x = Xfer { src: d.host_addr(&j.buf), dst: j.dst, len: j.len as u64 };
                    let r = d.copy(nc, std::slice::from_ref(&x));
                    if btx.send((j.buf, r)).is_err() {
                        break;
                    }
                }
            })
            .ok();
        Pipe { tx: Some(tx), back, thread, in_flight: 0 }
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A member being received.
struct Current {
    name: String,
    size: u64,
    /// Leading bytes not stored (an `.npy` preamble): the allocation holds the array data only,
    /// so a 1 GiB array takes a 1 GiB block, not the next power of two.
    skip: u64,
    /// Bytes of the member seen so far.
    seen: u64,
    /// The first bytes of an `.npy` member, until its preamble length is known.
    head: Vec<u8>,
    mem: Option<DevBuf>,
    /// Bytes handed to DMA so far.
    sent: u64,
}

/// A streamed member in device memory: `mem` holds the member from byte `skip` on.
pub struct StreamedMember {
    pub mem: DevBuf,
    pub skip: u64,
}

impl StreamedMember {
    /// Device address of byte `off` of the member (None inside the skipped preamble).
    pub fn addr_of(&self, off: u64) -> Option<u64> {
        Some(self.mem.addr() + off.checked_sub(self.skip)?)
    }
}

/// Streams members into device memory on NC `nc`'s HBM channel (see the module docs).
pub struct DeviceSink {
    dev: Device,
    nc: usize,
    chan: usize,
    min: u64,
    pipe: Option<Pipe>,
    /// Free bounce buffers; `fill` bytes of `free[0]` are pending.
    free: Vec<HostBuf>,
    fill: usize,
    cur: Option<Current>,
    done: HashMap<String, StreamedMember>,
    /// Bytes streamed into device memory.
    pub bytes: u64,
    /// The load succeeded: what is left is freed as is (see [`DeviceSink::commit`]).
    committed: bool,
}

/// A device failure as the streaming reader's sink error: the failure's own status
/// ([`HalError::status`]).
fn hal_err(e: HalError) -> SinkError {
    SinkError { status: e.status(), message: e.to_string() }
}

impl DeviceSink {
    /// A sink writing into device memory of `dev`'s NC `nc` (on its HBM channel).
    pub fn new(dev: &Device, nc: usize) -> Self {
        DeviceSink {
            dev: dev.clone(),
            nc,
            chan: dev.hbm_for_nc(nc),
            min: STREAM_MIN,
            pipe: None,
            free: Vec::new(),
            fill: 0,
            cur: None,
            done: HashMap::new(),
            bytes: 0,
            committed: false,
        }
    }

    /// The load that used this sink succeeded. Members still held (copied to their vars
    /// rather than adopted) hold this model's own, fully written weights and are freed as
    /// they are; without a commit, dropping the sink zeroes them first.
    pub fn commit(&mut self) {
        self.committed = true;
    }

    /// The device the members were written to.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// Takes the allocation holding streamed member `name`.
    pub fn take(&mut self, name: &str) -> Option<StreamedMember> {
        self.done.remove(name)
    }

    /// A streamed member, left in place (for a copy).
    pub fn get(&self, name: &str) -> Option<&StreamedMember> {
        self.done.get(name)
    }

    /// Allocate the current member's memory once its preamble length is known.
    fn open(&mut self) -> Result<(), SinkError> {
        let Some(c) = self.cur.as_mut() else { return Ok(()) };
        if c.mem.is_none() {
            let len = (c.size - c.skip).max(1);
            // Not zeroed: the stream writes bytes [0, size - skip), `end` zeroes the rest.
            c.mem = Some(self.dev.alloc_device_for_overwrite(self.chan, len, MEMBER_ALIGN).map_err(hal_err)?);
        }
        Ok(())
    }

    /// Store `data` (member bytes past the preamble) through the bounce buffers.
    fn store(&mut self, mut data: &[u8]) -> Result<(), SinkError> {
        while !data.is_empty() {
            if self.free.is_empty() {
                self.reap()?;
            }
            let room = BOUNCE - self.fill;
            let k = room.min(data.len());
            self.free[0].write(self.fill, &data[..k]).map_err(hal_err)?;
            self.fill += k;
            data = &data[k..];
            if self.fill == BOUNCE {
                self.flush()?;
            }
        }
        Ok(())
    }

    /// Wait for one DMA in flight; its buffer returns to the free list.
    fn reap(&mut self) -> Result<(), SinkError> {
        let p = self.pipe.as_mut().ok_or_else(|| SinkError { status: NrtStatus::Failure, message: "no DMA".into() })?;
        let (buf, r) = p
            .back
            .recv()
            .map_err(|_| SinkError { status: NrtStatus::Failure, message: "the weight DMA thread stopped".into() })?;
        p.in_flight -= 1;
        self.free.push(buf);
        r.map_err(hal_err)
    }

    /// Hand the pending bytes of the front bounce buffer to the DMA thread.
    fn flush(&mut self) -> Result<(), SinkError> {
        if self.fill == 0 {
            return Ok(());
        }
        let Some(cur) = self.cur.as_mut() else { return Ok(()) };
        let Some(mem) = cur.mem.as_ref() else { return Ok(()) };
        let buf = self.free.remove(0);
        let job = Job { buf, dst: mem.addr() + cur.sent, len: self.fill };
        cur.sent += self.fill as u64;
        self.fill = 0;
        let p = self.pipe.as_mut().ok_or_else(|| SinkError { status: NrtStatus::Failure, message: "no DMA".into() })?;
        let tx = p.tx.as_ref().ok_or_else(|| SinkError { status: NrtStatus::Failure, message: "no DMA".into() })?;
        tx.send(job)
            .map_err(|_| SinkError { status: NrtStatus::Failure, message: "the weight DMA thread stopped".into() })?;
        p.in_flight += 1;
        Ok(())
    }

    fn drain(&mut self) -> Result<(), SinkError> {
        while self.pipe.as_ref().is_some_and(|p| p.in_flight > 0) {
            self.reap()?;
        }
        Ok(())
    }
}

impl MemberSink for DeviceSink {
    /// `.npy` members of at least [`STREAM_MIN`] bytes: the weights. Other members (JSON
    /// manifests, engine programs, ucode, raw weight files) stay in host memory, where the
    /// manifest reader needs them whole.
    fn wants(&mut self, name: &str, size: u64) -> bool {
        size >= self.min && name.ends_with(".npy")
    }

    fn begin(&mut self, name: &str, size: u64) -> Result<(), SinkError> {
        if self.pipe.is_none() {
            for _ in 0..2 {
                self.free.push(self.dev.alloc_host(BOUNCE, 64).map_err(hal_err)?);
            }
            self.pipe = Some(Pipe::new(&self.dev, self.nc));
        }
        // A repeated name replaces the earlier member (its memory is freed now).
        self.done.remove(name);
        let npy = name.ends_with(".npy");
        self.cur =
            Some(Current { name: name.to_string(), size, skip: 0, seen: 0, head: Vec::new(), mem: None, sent: 0 });
        if !npy {
            self.open()?;
        }
        Ok(())
    }

    fn write(&mut self, data: &[u8]) -> Result<(), SinkError> {
        let Some(c) = self.cur.as_mut() else {
            return Err(SinkError { status: NrtStatus::Failure, message: "data outside a member".into() });
        };
        let at = c.seen;
        c.seen += data.len() as u64;
        let mut data = data;
        if c.mem.is_none() {
            // An `.npy` member: find the preamble's length (bytes 8..10), skip it.
            let k = (10 - c.head.len().min(10)).min(data.len());
            c.head.extend_from_slice(&data[..k]);
            if c.head.len() < 10 && c.seen < c.size {
                return Ok(());
            }
            c.skip = if c.head.len() >= 10 && c.head[..2] == [0x93, b'N'] {
                (u64::from(u16::from_le_bytes([c.head[8], c.head[9]])) + 10).min(c.size)
            } else {
                0
            };
            let skip = c.skip;
            // Member bytes [at, at + data.len()) arrived; those before `skip` are dropped.
            let drop_n = usize::try_from(skip.saturating_sub(at)).unwrap_or(usize::MAX).min(data.len());
            if skip == 0 {
                // Not a preamble after all: store the head bytes held back.
                let head = std::mem::take(&mut c.head);
                self.open()?;
                let held = head.len() - k;
                self.store(&head[..held])?;
                return self.store(data);
            }
            data = &data[drop_n..];
            self.open()?;
            return self.store(data);
        }
        let skip = c.skip;
        let drop_n = usize::try_from(skip.saturating_sub(at)).unwrap_or(usize::MAX).min(data.len());
        self.store(&data[drop_n..])
    }

    fn end(&mut self) -> Result<(), SinkError> {
        if self.cur.as_ref().is_some_and(|c| c.mem.is_none()) {
            // A short `.npy` member: store what was held back.
            if let Some(c) = self.cur.as_mut() {
                c.skip = 0;
            }
            let head = self.cur.as_mut().map(|c| std::mem::take(&mut c.head)).unwrap_or_default();
            self.open()?;
            self.store(&head)?;
        }
        self.flush()?;
        self.drain()?;
        if let Some(c) = self.cur.as_ref() {
            // Zero the bytes the stream did not write (an empty member's one-byte block).
            if let Some(mem) = c.mem.as_ref().filter(|m| c.sent < m.len()) {
                self.dev.zero_device(self.nc, mem.addr() + c.sent, mem.len() - c.sent).map_err(hal_err)?;
            }
        }
        if let Some(c) = self.cur.take() {
            self.bytes += c.sent;
            if let Some(mem) = c.mem {
                self.done.insert(c.name, StreamedMember { mem, skip: c.skip });
            }
        }
        Ok(())
    }
}

impl Drop for DeviceSink {
    /// A sink dropped without [`DeviceSink::commit`] zeroes the memory it still holds: the
    /// member being received (partly written over memory that was not zeroed) and the
    /// members of a refused NEFF. The DMA thread is stopped first, so nothing is in flight.
    fn drop(&mut self) {
        self.pipe = None;
        if self.committed {
            return;
        }
        let held = self.cur.take().and_then(|c| c.mem).into_iter().chain(self.done.drain().map(|(_, m)| m.mem));
        for mem in held {
            if let Err(e) = self.dev.zero_device(self.nc, mem.addr(), mem.len()) {
                // Still safe: freed memory is zeroed again before its next owner gets it
                // through `Device::alloc_device`.
                tracing::warn!("zeroing {} bytes of a refused NEFF's weights failed: {e}", mem.len());
            }
        }
    }
}

/// Copy `len` bytes of device memory from `src` (on `from`) to `dst` on `to`'s NC `nc`:
/// one DMA per 4 MiB on the same device, bounced through a bounded host buffer between
/// devices.
pub fn copy_member(from: &Device, src: u64, to: &Device, nc: usize, dst: u64, len: u64) -> Result<(), HalError> {
    let step = BOUNCE as u64;
    let mut off = 0;
    if from.same(to) {
        while off < len {
            let k = step.min(len - off);
            to.copy(nc, &[Xfer { src: src + off, dst: dst + off, len: k }])?;
            off += k;
        }
        return Ok(());
    }
    let from_nc = (0..from.nc_count()).next().unwrap_or(0);
    let mut buf = vec![0u8; BOUNCE.min(len as usize)];
    while off < len {
        let k = step.min(len - off) as usize;
        from.read_device(from_nc, src + off, &mut buf[..k])?;
        to.write_device(nc, dst + off, &buf[..k])?;
        off += k as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use neff::builder::{weights_model, WriteOptions};
    use neff::{Neff, ReadOptions, WeightFormat};

    use super::*;
    use crate::stage::vars::place_vars;

    fn device() -> Device {
        let arch = csr_maps::Arch::by_name("sunda").expect("arch");
        let sim = sim::SimDevice::new(sim::SimConfig::new(arch).hbm_bytes(1 << 26)).expect("sim");
        let opts = hal::DeviceOptions { hbm_limit: Some(1 << 26), ..Default::default() };
        let d = Device::open(Arc::new(sim), opts).expect("open");
        d.init().expect("init");
        d
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i.wrapping_mul(31) ^ (i >> 9)) as u8).collect()
    }

    fn neff_bytes(data: Vec<u8>, format: WeightFormat) -> Vec<u8> {
        let mut out = std::io::Cursor::new(Vec::new());
        weights_model(data, format).write_to(&mut out, &WriteOptions::default()).expect("write");
        out.into_inner()
    }

    /// The weights reach device memory intact through the double buffer (several bounce
    /// buffers' worth, not a multiple of their size): `.npy` members streamed (preamble
    /// skipped), adopted on the sink's NC and copied device to device on another; raw members
    /// held in memory and written as before.
    #[test]
    fn streamed_weights_land_in_device_memory() {
        let dev = device();
        for format in [WeightFormat::Npy, WeightFormat::Raw] {
            for nc in [0usize, dev.nc_count() - 1] {
                let data = pattern(3 * BOUNCE + 12_345);
                let bytes = neff_bytes(data.clone(), format);
                let mut sink = DeviceSink::new(&dev, 0);
                let n = Neff::parse_streaming(&bytes[..], bytes.len() as u64, &ReadOptions::default(), &mut sink)
                    .expect("parse");
                let g = &n.graphs[0];
                let v = g.var("weights").expect("var");
                if format == WeightFormat::Npy {
                    assert!(n.members.iter().any(|m| m.streamed), "the weights member was streamed");
                    assert!(n.payload_len() < 1 << 20, "host payload holds {} bytes", n.payload_len());
                    assert!(v.data.is_none() && v.streamed.is_some());
                } else {
                    // Raw weight files are held in memory (not streamed).
                    assert!(v.data.is_some() && v.streamed.is_none());
                }
                let vars = place_vars(&dev, g, nc, false, &|_| {}, Some(&mut sink)).expect("place");
                let sv = vars.iter().find(|x| x.name == "weights").expect("staged");
                let mut back = vec![0u8; data.len()];
                dev.read_device(nc, sv.addr, &mut back).expect("read");
                assert!(back == data, "{format:?} on NC {nc}: device bytes differ");
                // Adopted on the sink's own channel: nothing left over.
                if let (Some(s), true) = (&v.streamed, dev.hbm_for_nc(nc) == dev.hbm_for_nc(0)) {
                    assert!(sink.get(&s.member).is_none());
                }
            }
        }
    }

    /// Fill every free block of `order_bytes` on NC 0's channel with 0xA5 and free it again,
    /// so memory that is not zeroed before use shows stale bytes.
    fn dirty(dev: &Device, order_bytes: u64) {
        let chan = dev.hbm_for_nc(0);
        let junk = vec![0xA5u8; order_bytes as usize];
        let mut held = Vec::new();
        while let Ok(m) = dev.alloc_device(chan, order_bytes, 4096) {
            dev.write_device(0, m.addr(), &junk).expect("dirty");
            held.push(m);
        }
        assert!(!held.is_empty(), "nothing to dirty");
    }

    /// A var larger than its weight member (allowed for a non-file var) gets the weights at its
    /// start and zeros after them, although its memory and the member's were not zeroed at
    /// allocation and held an earlier owner's bytes.
    #[test]
    fn partly_covered_var_has_its_uncovered_bytes_zero() {
        let dev = device();
        dirty(&dev, 8 << 20);
        let data = pattern(BOUNCE + 4321);
        let extra = 8192 + 77;
        let mut model = weights_model(data.clone(), WeightFormat::Npy);
        let var = model.graphs[0].vars.iter_mut().find(|v| v.name == "weights").expect("var");
        var.kind = neff::VarKind::TmpBuf;
        var.size = (data.len() + extra) as u64;
        let mut out = std::io::Cursor::new(Vec::new());
        model.write_to(&mut out, &WriteOptions::default()).expect("write");
        let bytes = out.into_inner();
        let mut sink = DeviceSink::new(&dev, 0);
        let n =
            Neff::parse_streaming(&bytes[..], bytes.len() as u64, &ReadOptions::default(), &mut sink).expect("parse");
        let g = &n.graphs[0];
        assert!(g.var("weights").is_some_and(|v| v.streamed.is_some()), "the weights were streamed");
        let vars = place_vars(&dev, g, 0, false, &|_| {}, Some(&mut sink)).expect("place");
        let sv = vars.iter().find(|x| x.name == "weights").expect("staged");
        assert_eq!(sv.size, (data.len() + extra) as u64);
        let mut back = vec![0u8; data.len() + extra];
        dev.read_device(0, sv.addr, &mut back).expect("read");
        assert!(back[..data.len()] == data[..], "the weights");
        assert!(back[data.len()..].iter().all(|&b| b == 0), "stale bytes past the weights");
    }

    /// The bytes of a member's allocation the stream does not write (an `.npy` member that is
    /// all preamble gets a one-byte block) are zeroed.
    #[test]
    fn a_member_with_no_data_gets_a_zeroed_block() {
        let dev = device();
        dirty(&dev, 4096);
        let mut sink = DeviceSink::new(&dev, 0);
        let mut member = vec![b' '; 100];
        member[..8].copy_from_slice(b"\x93NUMPY\x01\x00");
        member[8..10].copy_from_slice(&90u16.to_le_bytes());
        sink.begin("empty.npy", 100).expect("begin");
        sink.write(&member).expect("write");
        sink.end().expect("end");
        let m = sink.get("empty.npy").expect("member");
        assert_eq!((m.skip, m.mem.len()), (100, 1));
        let mut b = [0xFFu8; 1];
        dev.read_device(0, m.mem.addr(), &mut b).expect("read");
        assert_eq!(b, [0]);
    }

    /// A load that fails midway (the member is cut short) leaves no weights behind: the sink,
    /// dropped without a commit, zeroes what it holds before freeing it.
    #[test]
    fn a_failed_stream_is_zeroed_when_the_sink_is_dropped() {
        let dev = device();
        let data = pattern(BOUNCE + 999);
        let (addr, len) = {
            let mut sink = DeviceSink::new(&dev, 0);
            sink.begin("w.bin", 2 * data.len() as u64).expect("begin");
            sink.write(&data).expect("write");
            sink.flush().expect("flush");
            sink.drain().expect("drain");
            let mem = sink.cur.as_ref().and_then(|c| c.mem.as_ref()).expect("allocated");
            let at = (mem.addr(), mem.len());
            let mut back = vec![0u8; data.len()];
            dev.read_device(0, at.0, &mut back).expect("read");
            assert!(back == data, "written before the failure");
            at
        };
        let mut back = vec![0xFFu8; len as usize];
        dev.read_device(0, addr, &mut back).expect("read");
        assert!(back.iter().all(|&b| b == 0), "weights of a failed load left in device memory");
    }

    /// A corrupt digest fails the load (after the weights were streamed) and everything the
    /// sink allocated is freed when it is dropped.
    #[test]
    fn digest_failure_frees_streamed_memory() {
        let dev = device();
        let mut bytes = neff_bytes(pattern(2 << 20), WeightFormat::Npy);
        let last = bytes.len() - 100;
        bytes[last] ^= 0x55;
        let chan = dev.hbm_for_nc(0);
        let before = dev.allocator().usage(chan).map(|u| u.used);
        {
            let mut sink = DeviceSink::new(&dev, 0);
            let r = Neff::parse_streaming(&bytes[..], bytes.len() as u64, &ReadOptions::default(), &mut sink);
            assert!(matches!(r, Err(neff::NeffError::Digest { .. })), "{r:?}");
        }
        assert_eq!(dev.allocator().usage(chan).map(|u| u.used), before);
    }
}
