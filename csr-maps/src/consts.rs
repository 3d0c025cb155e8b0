//! Arch-independent hardware numbers: magics, protocol constants, init values.
//! Per-arch numbers live in `arch/*.toml` ([`crate::Arch::consts`]).

/// UDMA (docs/facts/hardware.md §3).
pub mod udma {
    /// Queues per engine (`m:udma/udma.h`).
    pub const QUEUES: u64 = 16;
    /// Minimum ring size in descriptors (`m:udma/udma.h`).
    pub const RING_MIN_DESCS: u64 = 32;
    /// Maximum ring size in descriptors: 2^24 − 16 (`m:udma/udma.h`).
    pub const RING_MAX_DESCS: u64 = (1 << 24) - 16;
    /// Ring start/end alignment in bytes (`m:udma/udma.h`).
    pub const RING_ALIGN: u64 = 256;
    /// Descriptors of slack the driver keeps free (`m:udma/udma.h` free-slot formula).
    pub const RING_SLACK: u64 = 16;
    /// Initial ring id after a queue reset (`m:udma/udma.h`).
    pub const INITIAL_RING_ID: u8 = 1;
    /// Queue cfg bits enabled at init: en_pref | en_scheduling (`m:udma/udma_main.c`).
    pub const Q_CFG_ENABLE: u32 = (1 << 16) | (1 << 17);
    /// Queue `cfg` value the kmod keeps for a queue it programs: the register's hardware
    /// reset value, bits 24-25 set (`M2S_CFG_RESET_VALUE` / `S2M_CFG_RESET_VALUE` = 3 << 24,
    /// `udma_cache_defaults` in m:udma/udma_main.c). Pause and enable write it with the enable
    /// bits cleared or set, never a value read back (`udma_q_enable`).
    pub const Q_CFG_RESET: u32 = 3 << 24;
    /// Rate-limit mask written at queue init: DMB honoured (`m:udma/udma_main.c`).
    pub const RLIMIT_MASK_INIT: u32 = 0b011;
    /// cfg_len: max packet 0xFFFFF, length 0 = 64 KiB (`m:udma/udma_main.c`).
    pub const M2S_CFG_LEN: u32 = 0x010F_FFFF;
    /// Largest packet (FIRST..LAST) the M2S side accepts: the `max_pkt_size` field of
    /// `cfg_len` as the driver programs it (`m:udma/udma_regs.h` mask, `m:udma/udma_main.c`
    /// value). A longer packet raises the secondary group A "packet too long" cause, which
    /// aborts the engine (`m:udma/udma_iofic.c`).
    pub const MAX_PACKET_BYTES: u64 = (M2S_CFG_LEN & 0x000F_FFFF) as u64;
    /// Host-transfer ring size: 4096 requested, (n + 16) rounded up to a power of two
    /// (`m:neuron_ring.c`).
    pub const H2T_RING_DESCS: u32 = 8192;
    /// The dummy host ring queues are parked on when their owner goes away
    /// (`m:neuron_ring.h`, `m:neuron_ring.c`).
    pub const DUMMY_RING_DESCS: u32 = 64;
    /// Secondary group C (AXI-FIFO parity) causes of the M2S half: bits 0-5
    /// (`UDMA_V4_IOFIC_2ND_GROUP_C_M2S_ERROR_INTS`, `m:udma/udma_iofic.c`). The kmod writes
    /// them to group C's abort mask in `udma_iofic_m2s_error_ints_unmask` and then overwrites
    /// that register with the S2M set in `udma_iofic_s2m_error_ints_unmask`, so after init
    /// only [`SEC_C_S2M_ERRORS`] abort; both sets are unmasked (mask-clear is cumulative).
    pub const SEC_C_M2S_ERRORS: u32 = 0x0000_003F;
    /// Secondary group C causes of the S2M half: bits 6-11
    /// (`UDMA_V4_IOFIC_2ND_GROUP_C_S2M_ERROR_INTS`, `m:udma/udma_iofic.c`).
    pub const SEC_C_S2M_ERRORS: u32 = 0x0000_0FC0;
    /// Per-path single IOFIC groups (M2S descriptor read, data read, completion write; S2M
    /// descriptor read, data write, completion write): V2 unmasks and abort-enables all 32
    /// causes (`udma_m2m_set_axi_error_abort`, `m:udma/udma_m2m.c`).
    pub const PATH_GROUP_ERRORS: u32 = 0xFFFF_FFFF;
    /// AXI timeout written by the common engine init (`udma_set_defaults`,
    /// `m:udma/udma_main.c`: 100 * 1000 * 1000); V2 overwrites it at the end of its AXI error
    /// setup with the arch's `axi_timeout`.
    pub const AXI_TIMEOUT_INIT: u32 = 100_000_000;
    /// V3/V4 USER_ERRTRIG of a SENG engine: the group whose mask gets the M2S prefetch
    /// ring-id bit (`udma_m2m_mask_ring_id_error`: `intc_base + 2 * sizeof(struct
    /// iofic_grp_ctrl)`, `m:udma/udma_m2m.c`).
    pub const ERRTRIG_M2S_RING_ID_GROUP: u64 = 2;
    /// The M2S prefetch ring-id cause in that group: bit 11
    /// (`INT_CONTROL_GRP_UDMA_M2S_PREF_RING_ID`, `m:udma/udma_regs.h`).
    pub const ERRTRIG_M2S_RING_ID: u32 = 1 << 11;
    /// The USER_ERRTRIG group of the S2M prefetch ring-id cause (`m:udma/udma_m2m.c`).
    pub const ERRTRIG_S2M_RING_ID_GROUP: u64 = 3;
    /// The S2M prefetch ring-id cause: bit 2 (`INT_CONTROL_GRP_UDMA_S2M_PREF_RING_ID`,
    /// `m:udma/udma_regs.h`).
    pub const ERRTRIG_S2M_RING_ID: u32 = 1 << 2;
    /// V2 SDMA broadcast: the "last node" value for engines whose index within the NC is in
    /// [`BCAST_LAST_NODE_ENGINES`], 0 otherwise (`sdma_configure_broadcast`, `m:v2/sdma.h`).
    pub const BCAST_LAST_NODE: u32 = 0xFFFF;
    /// V2 SDMA broadcast: engine indices within the NC that are a group's last node
    /// (`sdma_configure_broadcast`, `m:v2/sdma.h`).
    pub const BCAST_LAST_NODE_ENGINES: [u64; 5] = [0, 3, 6, 9, 15];
    /// V2 SDMA broadcast group mask of engine `k` within its NC: 0xFFFF with its top `k`
    /// bits cleared (`sdma_configure_broadcast`, `m:v2/sdma.h`: bits 16 − i cleared for
    /// i = 0..=k, bit 16 being outside the 16-bit mask).
    pub const fn bcast_mask(k: u64) -> u32 {
        let k = if k > 16 { 16 } else { k };
        (0xFFFF_u32 >> k) & 0xFFFF
    }
    /// V2: AXI error-detection table entries set to 0xF (abort) for tables 0..5
    /// (`m:udma/udma_m2m.c`).
    pub const AXI_ERR_TABLE_ENTRIES: [u64; 6] = [1, 2, 3, 9, 10, 11];
    /// V2: AXI error-detection tables and controls programmed (`m:udma/udma_m2m.c`).
    pub const AXI_ERR_TABLES: u64 = 6;
    /// V2: value of an abort-enabled AXI error-table entry (`m:udma/udma_m2m.c`).
    pub const AXI_ERR_TABLE_ABORT: u32 = 0xF;
    /// V2: AXI error control data written per (control, queue) (`m:udma/udma_m2m.c`).
    pub const AXI_ERR_CTRL_DATA: u32 = 0x10;
    /// V2: AXI error control table address of queue q: (q << 3) | 7 (`m:udma/udma_m2m.c`).
    pub const fn axi_err_ctrl_addr(q: u64) -> u32 {
        ((q << 3) | 7) as u32
    }
    /// V2: the AXI timeout the driver writes last (`m:udma/udma_m2m.c`).
    pub const V2_AXI_TIMEOUT_FINAL: u32 = 0xFFFF_FFFF;
    /// M2S stream config (`m:udma/udma_main.c`).
    pub const M2S_STREAM_CFG: u32 = 0x102;
    /// AXI data/descriptor read config 0x10008 (`m:udma/udma_m2m.c`).
    pub const AXI_RD_CFG: u32 = 0x0001_0008;
    /// M2S prefetch cfg2: 65 descriptors per packet + force RR (`m:udma/udma_m2m.c`).
    pub const M2S_PREF_CFG2: u32 = 0x0001_0041;
    /// Prefetch cfg3 (`m:udma/udma_m2m.c`).
    pub const PREF_CFG3: u32 = 0x0000_4181;
    /// S2M completion config: 16-byte completion descriptors, queue promotion (`m:udma/udma_main.c`).
    pub const S2M_COMP_CFG: u32 = 0x0000_1004;
    /// GEN_EX address-high selectors (`m:udma/udma_main.c`).
    pub const VMPR_SEL: u32 = 0xFFFF_FFFF;
    /// IOFIC group control written to secondary groups A and B, primary group D and (V2) the
    /// per-path groups: set cause on the rising edge (bit 3) and no MSI-X (bit 5)
    /// (`INT_CONTROL_GRP_SET_ON_POSEDGE | INT_CONTROL_GRP_MASK_MSI_X`, `m:udma/udma_iofic.c`).
    pub const IOFIC_CONTROL: u32 = 0x28;
    /// Secondary group A causes enabled for abort+unmask (`m:udma/udma_iofic.c`).
    pub const SEC_A_ERRORS: u32 = 0x0FFF_FFFF;
    /// Secondary group B causes enabled (`m:udma/udma_iofic.c`).
    pub const SEC_B_ERRORS: u32 = 0xFFFF_EF07;
    /// Primary group D summaries unmasked with the M2S errors: secondary A (bit 8) and C
    /// (bit 10) (`INT_GROUP_D_M2S | INT_UDMA_V4_GROUP_D_2ND_IOFIC_GROUP_C`, `m:udma/udma_iofic.c`).
    pub const PRI_D_M2S: u32 = (1 << 8) | (1 << 10);
    /// Primary group D summaries unmasked with the S2M errors: secondary B (bit 9) and C
    /// (bit 10) (`m:udma/udma_iofic.c`).
    pub const PRI_D_S2M: u32 = (1 << 9) | (1 << 10);
    /// Engine change-state values (`m:udma/udma_regs.h`).
    pub const STATE_NORMAL: u32 = 0x1;
    /// Disable.
    pub const STATE_DISABLE: u32 = 0x2;
    /// Abort.
    pub const STATE_ABORT: u32 = 0x4;
    /// Engine state field values (`m:udma/udma_regs.h`).
    pub const FIELD_IDLE: u32 = 0;
    /// Normal.
    pub const FIELD_NORMAL: u32 = 1;
    /// Abort.
    pub const FIELD_ABORT: u32 = 2;
    /// Completion marker the kmod's H2T copies write to a host word (`m:neuron_dma.c`).
    pub const COMPLETION_MARKER: u32 = 0xABCD_EF01;
    /// Queue pause settle time after clearing cfg bits (`ndmar_quiesce_queues`), µs.
    pub const QUIESCE_WAIT_US: u64 = 4;
}

/// Notification queues (docs/facts/hardware.md §4, docs/facts/libnrt.md §5).
pub mod nq {
    /// Record size.
    pub const ENTRY_BYTES: u64 = 16;
    /// NQ types: TRACE 0, NOTIFY 1, EVENT 2, ERROR 3, TRACE_DMA 4, THROTTLE 5.
    pub const TYPE_TRACE: u64 = 0;
    /// NOTIFY.
    pub const TYPE_NOTIFY: u64 = 1;
    /// EVENT.
    pub const TYPE_EVENT: u64 = 2;
    /// ERROR.
    pub const TYPE_ERROR: u64 = 3;
    /// TRACE_DMA.
    pub const TYPE_TRACE_DMA: u64 = 4;
    /// THROTTLE.
    pub const TYPE_THROTTLE: u64 = 5;
    /// Engine slots per type: nq id = type × 16 + engine.
    pub const ENGINES_PER_TYPE: u64 = 16;
    /// Teardown drain wait (`m:neuron_nq.c`), ms.
    pub const DRAIN_MS: u64 = 1;
    /// Records libnrt reads per engine per sweep (docs/facts/libnrt.md §5.4).
    pub const LIBNRT_SWEEP: usize = 16;

    /// The name of NQ type `kind` (`trace`, `notify`, … ; `unknown` for another value).
    pub fn type_name(kind: u64) -> &'static str {
        match kind {
            TYPE_TRACE => "trace",
            TYPE_NOTIFY => "notify",
            TYPE_EVENT => "event",
            TYPE_ERROR => "error",
            TYPE_TRACE_DMA => "trace_dma",
            TYPE_THROTTLE => "throttle",
            _ => "unknown",
        }
    }
}

/// FW-IO mailbox protocol (docs/facts/hardware.md §6.1-6.2).
pub mod fwio {
    /// Legacy READ (payload: N × u64 device addresses).
    pub const CMD_READ: u8 = 1;
    /// Legacy POST_TO_CW (metrics blob).
    pub const CMD_POST_TO_CW: u8 = 2;
    /// SET_POWER_PROFILE.
    pub const CMD_SET_POWER_PROFILE: u8 = 3;
    /// GET_DATA.
    pub const CMD_GET_DATA: u8 = 4;
    /// SET_FEATURE.
    pub const CMD_SET_FEATURE: u8 = 5;
    /// Response error codes: 0 success, 1 failed, 2 unknown command.
    pub const ERR_SUCCESS: u8 = 0;
    /// Failed.
    pub const ERR_FAILED: u8 = 1;
    /// Unknown command (stops retrying).
    pub const ERR_UNKNOWN_CMD: u8 = 2;
    /// New-protocol header bytes (payload + 8 = size field).
    pub const NEW_HEADER_BYTES: u16 = 8;
    /// Largest new-protocol payload (misc 0x100..0x17F).
    pub const MAX_PAYLOAD: usize = 128;
    /// Legacy-protocol request header bytes in host memory: seq u8, cmd u8, size u16, CRC-32C
    /// u32 (`m:neuron_fw_io.h` `struct fw_io_request`).
    pub const LEGACY_REQUEST_HEADER_BYTES: usize = 8;
    /// Legacy-protocol response header bytes: seq u8, error u8, size u16
    /// (`m:neuron_fw_io.h` `struct fw_io_response`).
    pub const LEGACY_RESPONSE_HEADER_BYTES: usize = 4;
    /// Largest legacy request, header included: the kmod's request buffer
    /// (`m:neuron_fw_io.c` FW_IO_MAX_SIZE 0xffff).
    pub const LEGACY_MAX_REQUEST: usize = 0xFFFF;
    /// Addresses one legacy READ may name: as many as a response of [`LEGACY_MAX_REQUEST`]
    /// bytes holds (4 bytes each after its header). Modeled: the sources give no firmware limit.
    pub const LEGACY_MAX_READS: usize = (LEGACY_MAX_REQUEST - LEGACY_RESPONSE_HEADER_BYTES) / 4;
    /// Poll period, ms.
    pub const POLL_MS: u64 = 1;
    /// Per-command timeouts in ms, indexed by command (0 unused).
    pub const TIMEOUT_MS: [u64; 6] = [0, 1000, 1000, 90_000, 10_000, 60_000];
    /// Per-command attempts, indexed by command.
    pub const RETRIES: [u32; 6] = [0, 15, 15, 3, 3, 3];
    /// CRC-32C reflected polynomial (Castagnoli).
    pub const CRC32C_POLY: u32 = 0x82F6_3B78;
    /// Value misc registers read while the firmware is not ready (`m:neuron_fw_io.c`,
    /// `fw_io_read_csr_array_direct` retries while a read returns it); also
    /// what they read while a reset is in progress.
    pub const NOT_READY: u32 = 0xDEAD_BEEF;
    /// A register read that returns [`NOT_READY`] is retried for this many windows of
    /// [`NOT_READY_WINDOW_MS`] (`m:neuron_fw_io.c` FW_IO_RD_RETRY 15; newer header 30).
    pub const NOT_READY_WINDOWS: u32 = 15;
    /// Length of one read-retry window, ms (`m:neuron_fw_io.c`).
    pub const NOT_READY_WINDOW_MS: u64 = 1000;
    /// Device-id polls at probe (`m:v2/neuron_dhal_v2.c`: up to 20 reads 1 s apart).
    pub const READY_POLLS: u32 = 20;
    /// Period of the device-id poll at probe, ms (`m:v2/neuron_dhal_v2.c`).
    pub const READY_POLL_MS: u64 = 1000;
    /// reset_request kinds.
    pub const RESET_DEVICE: u32 = 1;
    /// TPB (NC) reset.
    pub const RESET_TPB: u32 = 2;
    /// fw_status bit3: reset still in progress (`m:neuron_reset.h`).
    pub const FW_STATUS_RESET_BUSY: u32 = 1 << 3;
    /// Completion polls after a reset: 5, sleeping 100·i ms before retry i.
    pub const RESET_DONE_POLLS: u32 = 5;
    /// GET_DATA types (`r:neuron_fw_io.c@f4e736b`): current performance profile.
    pub const GET_DATA_PERF_PROFILE: u8 = 1;
    /// Available performance profiles.
    pub const GET_DATA_AVAILABLE_PROFILES: u8 = 2;
    /// Switch-fabric BAR info.
    pub const GET_DATA_BAR_INFO: u8 = 0x10;
}

/// Q7 / nrtucode (docs/facts/libnrt.md §6-7, docs/facts/libnrt-runtime-model.md §C).
pub mod q7 {
    /// Core published READY (unclaimed); also `.globstruct[0]` of the image.
    pub const READY: u32 = 0x6099_CB34;
    /// Core claimed by a runtime instance.
    pub const CLAIMED: u32 = 0x502B_2DA1;
    /// nrtucode API level the runtime requires.
    pub const API_LEVEL: u32 = 3;
    /// DGE gate mask of admitted NX_POOL coretypes (bits 2, 9, 17, 25, 32).
    pub const NX_POOL_MASK: u64 = 0x1_0202_0204;
    /// Pool cores per NC.
    pub const POOL_CORES: u64 = 8;
    /// nrtucode error codes.
    pub const ERR_BAD_API: u32 = 4;
    /// Out of memory.
    pub const ERR_OOM: u32 = 5;
    /// Prelinked image too large.
    pub const ERR_TOO_LARGE: u32 = 7;
    /// Invalid / not booted / not attached / already claimed / gate violation.
    pub const ERR_INVALID: u32 = 8;
    /// Device buffer reserved per loadable library.
    pub const LL_DEVICE_BYTES: u64 = 16 << 20;
}

/// The sequencer (docs/facts/libnrt.md §2.1, §1.4).
pub mod seq {
    /// Slot size.
    pub const SLOT_BYTES: usize = 64;
    /// SP slot size.
    pub const SP_SLOT_BYTES: usize = 8;

    /// A TPB sequencer engine of a NeuronCore, in `al_hal_tpb_eng_type` order (§1.4): the
    /// one engine type of the workspace. The index is the engine's instance in the
    /// sequencer, notification and Q7 NX register maps, its notific_type group
    /// ([`crate::formats::notify::tag::engine`]) and the NEFF's file stem / def.json key
    /// order; the name is the file stem / def.json key (`pe`, `act`, `pool`, `dve`, `sp`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum Engine {
        /// Processing engine (matmul).
        Pe = 0,
        /// Activation engine.
        Act = 1,
        /// Pool engine (also the engine libnrt's tag fixup and Q7 NX ucode target).
        Pool = 2,
        /// Vector engine.
        Dve = 3,
        /// Sync engine: the sequencer master whose end record comes last.
        Sp = 4,
    }

    impl Engine {
        /// Engines per NC.
        pub const COUNT: usize = 5;
        /// Every engine, in index order.
        pub const ALL: [Engine; Engine::COUNT] = [Engine::Pe, Engine::Act, Engine::Pool, Engine::Dve, Engine::Sp];

        /// `al_hal_tpb_eng_type`: the engine's instance index.
        pub const fn index(self) -> usize {
            self as usize
        }

        /// The engine of index `i`, if any.
        pub const fn from_index(i: usize) -> Option<Engine> {
            if i < Engine::COUNT {
                Some(Engine::ALL[i])
            } else {
                None
            }
        }

        /// File stem / def.json key / register-map name: `pe`, `act`, `pool`, `dve`, `sp`.
        pub const fn name(self) -> &'static str {
            match self {
                Engine::Pe => "pe",
                Engine::Act => "act",
                Engine::Pool => "pool",
                Engine::Dve => "dve",
                Engine::Sp => "sp",
            }
        }

        /// The name in capitals, as profiles and traces label engines: `PE`, `ACT`, ….
        pub const fn label(self) -> &'static str {
            match self {
                Engine::Pe => "PE",
                Engine::Act => "ACT",
                Engine::Pool => "POOL",
                Engine::Dve => "DVE",
                Engine::Sp => "SP",
            }
        }

        /// The engine named `s` ([`Self::name`]).
        pub fn from_name(s: &str) -> Option<Engine> {
            Engine::ALL.into_iter().find(|e| e.name() == s)
        }
    }

    impl core::fmt::Display for Engine {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.write_str(self.name())
        }
    }
    /// Engine status values of the modeled `seq_engine.status.state` field.
    pub const STATE_IDLE: u32 = 0;
    /// Running.
    pub const STATE_RUNNING: u32 = 1;
    /// Waiting on a semaphore.
    pub const STATE_WAITING: u32 = 2;
    /// Halted (end of program without loop, or halt).
    pub const STATE_HALTED: u32 = 3;
    /// Fault (SEQUENCER_FATAL posted).
    pub const STATE_FAULT: u32 = 4;

    /// The name of engine state `s` (`idle`, `running`, … ; `unknown` for another value).
    pub fn state_name(s: u32) -> &'static str {
        match s {
            STATE_IDLE => "idle",
            STATE_RUNNING => "running",
            STATE_WAITING => "waiting",
            STATE_HALTED => "halted",
            STATE_FAULT => "fault",
            _ => "unknown",
        }
    }

    /// Modeled fault codes: `seq_engine.status.fault_code` and the info byte of the
    /// SEQUENCER_FATAL / SEQUENCER_NONFATAL error record's sequencer metadata.
    pub mod fault {
        /// Slot fetch failed (DMA fault on the instruction queue).
        pub const FETCH: u8 = 0x01;
        /// Malformed slot (word length, address mode, sizes).
        pub const MALFORMED: u8 = 0x02;
        /// Opcode not executable (unknown, or a pseudo-instruction that was not lowered).
        pub const UNKNOWN_OPCODE: u8 = 0x03;
        /// Unsupported wait mode.
        pub const WAIT_MODE: u8 = 0x04;
        /// Unsupported update mode.
        pub const UPDATE_MODE: u8 = 0x05;
        /// Memory access fault while executing.
        pub const MEMORY: u8 = 0x06;
        /// Collective could not run (group, type or peer mismatch).
        pub const COLLECTIVE: u8 = 0x07;
        /// DGE op refused by the mailbox gate (non-fatal).
        pub const DGE_GATE: u8 = 0x08;
        /// Injected by the simulator's fault API.
        pub const INJECTED: u8 = 0x10;
    }

    /// The 16-bit error mask of a TPB error record (record bits 23:8, `metadata_lo`;
    /// docs/facts/libnrt.md §5.5, docs/records.md). libnrt reads it for FP_NAN (numerical iff a
    /// bit outside `0x7E00` and the arch's DVE-spurious mask is set) and MEMORY_ERROR (memory
    /// error iff `mask & 0xFD6B`). Which bit the hardware sets for which condition is not public:
    /// the values below are **modeled**.
    pub mod error_mask {
        /// FP_NAN: a NaN produced by the engine's datapath (outside the ignored `0x7E00`).
        pub const NAN_RESULT: u16 = 0x0001;
        /// Records whose id carries no mask (sequencer, semaphore, …).
        pub const NONE: u16 = 0;
        /// ECC records (`formats::notify::ntype::ECC`): set for an uncorrectable error, clear
        /// for a corrected one.
        pub const ECC_UNCORRECTABLE: u16 = 0x0001;
    }
}

/// PSEUDO_ADDR8 addressing (docs/facts/libnrt.md §2.4): marker bit 0x10 of the high byte names a var;
/// the var id / offset split below is **modeled**.
pub mod addr8 {
    /// Marker bit (in the address's high byte) of a var-relative address.
    pub const VAR_MARKER: u64 = 0x10 << 56;
    /// Var id field: bits 32..48.
    pub const VAR_ID_SHIFT: u32 = 32;
    /// Var id mask (after the shift).
    pub const VAR_ID_MASK: u64 = 0xFFFF;
    /// Byte offset: bits 0..32.
    pub const OFFSET_MASK: u64 = 0xFFFF_FFFF;
    /// The address-mode bits of the high byte (mask 0xFC); 0 = immediate.
    pub const MODE_SHIFT: u32 = 56;
}

/// The NC ownership region table (`nc_regions`, modeled: no public source places an
/// ownership table; this project's model).
pub mod regions {
    /// Entries per NC (`nc_regions.entry[..]`).
    pub const ENTRIES: usize = 256;
    /// `oob_cause.kind`: a data read (DMA source, DMAMEMCPY / collective source).
    pub const KIND_READ: u32 = 1;
    /// `oob_cause.kind`: a data write (DMA destination incl. CSRs, DMAMEMCPY / collective
    /// destination, WRITE target).
    pub const KIND_WRITE: u32 = 2;
    /// `oob_cause.kind`: a sequencer instruction fetch.
    pub const KIND_FETCH: u32 = 3;
    /// `oob_cause.kind`: a DMA descriptor fetch.
    pub const KIND_DESC: u32 = 4;
    /// `oob_cause.source` of DMA engine `n` of the NC: this + n (sequencer engines are 0..=4).
    pub const SOURCE_DMA: u32 = 0x10;
}

/// The NC collectives barrier task (`nc_barrier`, modeled: libnrt's barrier proxy is a host
/// task; no public source places a register for it; this project's model, docs/faults.md).
pub mod barrier {
    /// `status.state`: never armed since the last reset.
    pub const IDLE: u32 = 0;
    /// `status.state`: armed; some rank of the group has not arrived yet.
    pub const OUTSTANDING: u32 = 1;
    /// `status.state`: every rank of the group arrived.
    pub const DONE: u32 = 2;
    /// `status.state`: the barrier failed (its group disagreed, or the transport to the other
    /// ranks failed).
    pub const FAILED: u32 = 3;
    /// `status.generation` wraps at this many arrivals.
    pub const GENERATION_MASK: u32 = 0xFF_FFFF;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let types: Vec<_> = (0..7).map(nq::type_name).collect();
        assert_eq!(types, ["trace", "notify", "event", "error", "trace_dma", "throttle", "unknown"]);
        let states: Vec<_> = (0..6).map(seq::state_name).collect();
        assert_eq!(states, ["idle", "running", "waiting", "halted", "fault", "unknown"]);
    }

    #[test]
    fn the_engine_type_matches_every_register_map() {
        use seq::Engine;
        for (i, e) in Engine::ALL.into_iter().enumerate() {
            assert_eq!((e.index(), Engine::from_index(i)), (i, Some(e)));
            assert_eq!(Engine::from_name(e.name()), Some(e));
            assert_eq!(e.label(), e.name().to_ascii_uppercase());
        }
        assert_eq!(Engine::from_index(Engine::COUNT), None);
        assert_eq!(Engine::from_name("PE"), None);
        let names: Vec<_> = Engine::ALL.map(Engine::name).to_vec();
        assert_eq!(names, ["pe", "act", "pool", "dve", "sp"]);
        for a in crate::ARCHES {
            assert_eq!(a.counts.tpb_engines as usize, Engine::COUNT, "{}", a.name);
        }
    }

    #[test]
    fn region_table_entries_match_the_block() {
        let m = platform::MemMmio::new(0x4000);
        let b = crate::blocks::nc_regions::Block::at(&m, 0);
        assert!(b.entry(regions::ENTRIES as u64 - 1).is_ok());
        assert!(b.entry(regions::ENTRIES as u64).is_err());
    }
}

/// The kmod's process model, which the broker keeps in userspace (docs/sharing.md).
pub mod process {
    /// Processes that may use one device at a time (attached, with or without NeuronCores):
    /// `NEURON_MAX_PROCESS_PER_DEVICE` (`m:share/neuron_driver_shared.h`; the kmod's per-device
    /// table of attached processes, `m:neuron_pid.c`).
    pub const MAX_PER_DEVICE: usize = 16;
}
