//! Step 6, stage ucode: the default DGE mailboxes and priority classes on the NC's NX POOL
//! core, then the graph's Q7 ucode libraries — each ucode_lib's prelinked UCPL image is
//! staged in device memory and handed to Q7 pool core 0 (claimed for the model's lifetime;
//! released at unload).

use hal::q7::{CoreKind, LoadableLib, UcodeContext, UcodeCore};
use hal::Device;
use neff::{Engine, Graph};

use super::{StageError, StageErrorKind};

/// Program the default DGE mailboxes on NC `nc`'s NX POOL core (the core is kept with the
/// staged NC).
pub fn dge_mailboxes(dev: &Device, nc: usize) -> Result<UcodeCore, StageError> {
    let ctx = UcodeContext::new(csr_maps::consts::q7::API_LEVEL).map_err(hal::HalError::from)?;
    let mut core = UcodeCore::new(&ctx, dev, nc, CoreKind::Nx { engine: Engine::Pool.index() as u64 })
        .map_err(hal::HalError::from)?;
    core.on_ucode_booted()
        .map_err(|source| StageError::from(StageErrorKind::Claim { core: format!("NC {nc}"), source }))?;
    core.dge_mailboxes(0).map_err(hal::HalError::from)?;
    Ok(core)
}

/// Stage the graph's ucode libraries on Q7 pool core 0 of `nc`.
pub fn stage_ucode(dev: &Device, g: &Graph, nc: usize) -> Result<(Option<UcodeCore>, Vec<LoadableLib>), StageError> {
    use csr_maps::formats::ucpl::UcplHeader;
    let libs: Vec<&neff::UcodeLib> = g.ucode_libs.iter().filter(|l| l.content.is_some()).collect();
    if libs.is_empty() {
        return Ok((None, Vec::new()));
    }
    let ucode_err = |name: &str, source: hal::q7::UcodeError| {
        StageError::from(StageErrorKind::Ucode { what: format!("ucode library {name}"), source })
    };
    let ctx = UcodeContext::new(csr_maps::consts::q7::API_LEVEL).map_err(|e| ucode_err("context", e))?;
    let mut core = UcodeCore::new(&ctx, dev, nc, CoreKind::Q7Pool { core: 0 }).map_err(|e| ucode_err("core", e))?;
    core.on_ucode_booted().map_err(|source| {
        StageError::from(StageErrorKind::Claim { core: format!("NC {nc} Q7 pool core 0"), source })
    })?;
    let mut staged = Vec::new();
    for l in libs {
        let Some(content) = &l.content else { continue };
        let bytes: &[u8] = content.as_ref();
        if UcplHeader::decode(bytes).is_err() {
            return Err(StageError::from(StageErrorKind::NotPrelinked { library: l.name.clone() }));
        }
        let ll = match LoadableLib::create(&ctx, dev, nc, &l.name, bytes) {
            Ok(ll) => ll,
            Err(hal::HalError::Ucode(e)) => return Err(ucode_err(&l.name, e)),
            Err(e) => return Err(e.into()),
        };
        core.attach(&ll).map_err(|e| ucode_err(&l.name, e))?;
        staged.push(ll);
    }
    Ok((Some(core), staged))
}
