//! The csr-maps generator: reads the declarative register descriptions (`blocks/*.toml`, one
//! per register block, and `arch/*.toml`, one per arch), checks them, and writes the typed Rust
//! that csr-maps includes — one module per block with register value types and block handles,
//! static metadata tables, and per-arch data.
//!
//! It is a build-dependency of csr-maps (`csr-maps/build.rs` calls [`Descriptions::load`] and
//! [`generate`]); it is a crate of its own so that the parser, the checks and the emitted code
//! have tests.

mod emit;
pub mod model;
mod validate;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use emit::generate;
use model::{ArchFile, BlockFile};

/// What is wrong with the descriptions.
#[derive(Debug, thiserror::Error)]
pub enum GenError {
    /// A description folder or file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The folder or file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file is not valid TOML or does not have the description's shape (unknown or missing
    /// key, wrong type, unknown guard class).
    #[error("{path}: {message}")]
    Parse {
        /// The file (or the name given to [`Descriptions::from_texts`]).
        path: String,
        /// The TOML parser's message (with line and column).
        message: String,
    },
    /// The descriptions parse but are inconsistent (overlap, out of bounds, unknown block, …).
    #[error("{0}")]
    Invalid(String),
}

/// A checked set of descriptions: every block and every arch, consistent with each other.
#[derive(Debug)]
pub struct Descriptions {
    blocks: BTreeMap<String, BlockFile>,
    arches: Vec<ArchFile>,
    files: Vec<PathBuf>,
}

impl Descriptions {
    /// Reads and checks `root/blocks/*.toml` and `root/arch/*.toml` (each folder in file-name
    /// order). A block file must be named after its block.
    pub fn load(root: &Path) -> Result<Self, GenError> {
        let block_files = toml_files(&root.join("blocks"))?;
        let arch_files = toml_files(&root.join("arch"))?;
        let read = |p: &PathBuf| {
            std::fs::read_to_string(p)
                .map(|t| (p.display().to_string(), t))
                .map_err(|source| GenError::Io { path: p.clone(), source })
        };
        let blocks = block_files.iter().map(read).collect::<Result<Vec<_>, _>>()?;
        let arches = arch_files.iter().map(read).collect::<Result<Vec<_>, _>>()?;
        let mut d = Self::from_texts(&blocks, &arches)?;
        d.files = block_files.into_iter().chain(arch_files).collect();
        Ok(d)
    }

    /// Parses and checks descriptions given as `(path, text)` pairs: the path names the file in
    /// errors, and a block's file stem must equal its name.
    pub fn from_texts(blocks: &[(String, String)], arches: &[(String, String)]) -> Result<Self, GenError> {
        let mut by_name = BTreeMap::new();
        for (path, text) in blocks {
            let b: BlockFile = parse(path, text)?;
            if Path::new(path).file_stem().and_then(|s| s.to_str()) != Some(b.name.as_str()) {
                return Err(GenError::Invalid(format!("{path}: file name must equal block name {}", b.name)));
            }
            if let Some(prev) = by_name.insert(b.name.clone(), b) {
                return Err(GenError::Invalid(format!("{path}: block {} described twice", prev.name)));
            }
        }
        let arches = arches.iter().map(|(path, text)| parse::<ArchFile>(path, text)).collect::<Result<Vec<_>, _>>()?;
        validate::all(&by_name, &arches)?;
        Ok(Self { blocks: by_name, arches, files: Vec::new() })
    }

    /// The blocks, by name.
    pub fn blocks(&self) -> &BTreeMap<String, BlockFile> {
        &self.blocks
    }

    /// The arches, in file order.
    pub fn arches(&self) -> &[ArchFile] {
        &self.arches
    }

    /// The files [`Descriptions::load`] read (for a build script's `rerun-if-changed`).
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }
}

fn parse<T: serde::de::DeserializeOwned>(path: &str, text: &str) -> Result<T, GenError> {
    toml::from_str(text).map_err(|e| GenError::Parse { path: path.to_string(), message: e.to_string() })
}

/// The `.toml` files of `dir`, sorted.
fn toml_files(dir: &Path) -> Result<Vec<PathBuf>, GenError> {
    let io = |source| GenError::Io { path: dir.to_path_buf(), source };
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io)? {
        let p = e.map_err(io)?.path();
        if p.extension().is_some_and(|x| x == "toml") {
            v.push(p);
        }
    }
    v.sort();
    Ok(v)
}
