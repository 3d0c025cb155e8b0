//! The one framing codec of the project's socket protocols — the broker's lease protocol
//! (`broker-client`) and the device host's requests (`sim-serve`) — and the one way file
//! descriptors travel between processes ([`fdpass`], also what VFIO's descriptor hand-over
//! and vfio-user use). It knows no device and no message: each protocol is a [`Format`] (its
//! header layout, version, widths and size limit) and its messages written with [`Enc`] and
//! read with [`Dec`].
//!
//! - [`codec`]: [`Format`], [`Enc`], [`Dec`], [`DecodeError`];
//! - [`frame`]: whole frames read from a stream or received from a unix socket with their
//!   descriptors, and sent with them ([`FrameError`]);
//! - [`fdpass`]: descriptors over a unix socket.

pub mod codec;
pub mod fdpass;
pub mod frame;

pub use codec::{Dec, DecodeError, Enc, Format, Length, Width};
pub use frame::{send_frame, FrameError};
