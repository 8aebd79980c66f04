//! Signed entries (spec 1.1, section 13.1, DF-SEC-140 to DF-SEC-146; OPTIONAL): Ed25519 signatures
//! of an entry by its origin, public keys pinned per node id. Same message, keys file and rules as
//! the Python reference (`delta_fabric.signing`).
//!
//! The signed message (DF-SEC-141), integers little-endian: the 31-byte [`SIGNATURE_DOMAIN`], the
//! 32-byte fingerprint, origin, incarnation and seq (u64 each), the encoding (u8), the number n of
//! indices (u32), the n indices (u32 each) and the n values as on the wire (4 bytes each for F32,
//! 2 for F16 and BF16). `hops` is not signed: relays change it (DF-SEC-144).

use std::collections::HashMap;
use std::fmt;

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde_json::Value;

use crate::encodings::{Carrier, ValueEncoding, codec};
use crate::wire::SIGNATURE_SIZE;

/// Domain-separation prefix of the signed message (DF-SEC-141): 31 bytes, ending with a 0 byte.
pub const SIGNATURE_DOMAIN: &[u8; 31] = b"DeltaFabric/v1 entry signature\x00";
/// Length of an Ed25519 public key and of a secret seed.
pub const KEY_SIZE: usize = 32;

/// A key or keys file that is not what it should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError(pub String);

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KeyError {}

/// The byte string an origin signs for an entry in a packet of `encoding` (DF-SEC-141).
pub fn signed_message(
    fingerprint: &[u8; 32],
    encoding: ValueEncoding,
    origin: u64,
    incarnation: u64,
    seq: u64,
    indices: &[u32],
    values: &[f32],
) -> Vec<u8> {
    let vc = codec(encoding);
    let per = if vc.is_wide() { 4 } else { 2 };
    let mut m = Vec::with_capacity(31 + 32 + 29 + indices.len() * 4 + values.len() * per);
    m.extend_from_slice(SIGNATURE_DOMAIN);
    m.extend_from_slice(fingerprint);
    m.extend_from_slice(&origin.to_le_bytes());
    m.extend_from_slice(&incarnation.to_le_bytes());
    m.extend_from_slice(&seq.to_le_bytes());
    m.push(encoding.to_u8());
    m.extend_from_slice(&(indices.len() as u32).to_le_bytes());
    for i in indices {
        m.extend_from_slice(&i.to_le_bytes());
    }
    match vc.carrier {
        Carrier::Values32 => values
            .iter()
            .for_each(|v| m.extend_from_slice(&v.to_bits().to_le_bytes())),
        Carrier::Values16 { encode, .. } => values
            .iter()
            .for_each(|&v| m.extend_from_slice(&encode(v).to_le_bytes())),
        // Q8 (section 6.8): the entry's scale (binary32) before the n signed bytes, so that
        // neither can be changed alone
        Carrier::Values8 => {
            let (scale, q) =
                crate::compact::q8_encode(values).unwrap_or((0.0, vec![0; values.len()]));
            m.extend_from_slice(&scale.to_bits().to_le_bytes());
            m.extend(q.iter().map(|&x| x.to_le_bytes()[0]));
        }
    }
    m
}

/// The 32-byte public key of a 32-byte secret seed.
pub fn public_key_of(secret: &[u8; KEY_SIZE]) -> [u8; KEY_SIZE] {
    SigningKey::from_bytes(secret).verifying_key().to_bytes()
}

/// A node's part in a signed cluster: the pinned public key of every node id (DF-SEC-145; the
/// node's own included, derived from the secret when absent) and, to generate, its secret seed.
#[derive(Clone)]
pub struct Signing {
    keys: HashMap<u64, VerifyingKey>,
    secret: Option<SigningKey>,
}

impl fmt::Debug for Signing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signing")
            .field("keys", &self.keys.len())
            .field("can_sign", &self.secret.is_some())
            .finish()
    }
}

impl Signing {
    /// From pinned public keys and an optional secret seed of node `node_id`. Errors: a node id 0,
    /// an invalid public key, or a pinned own key that is not the secret's.
    pub fn new(
        keys: &[(u64, [u8; KEY_SIZE])],
        secret: Option<[u8; KEY_SIZE]>,
        node_id: Option<u64>,
    ) -> Result<Signing, KeyError> {
        let mut map = HashMap::with_capacity(keys.len() + 1);
        for (node, key) in keys {
            if *node == 0 {
                return Err(KeyError("node id 0 in the keys".into()));
            }
            let k = VerifyingKey::from_bytes(key)
                .map_err(|e| KeyError(format!("public key of {node:016x}: {e}")))?;
            map.insert(*node, k);
        }
        let secret = secret.map(|s| SigningKey::from_bytes(&s));
        if let (Some(sk), Some(id)) = (&secret, node_id) {
            let own = sk.verifying_key();
            if *map.entry(id).or_insert(own) != own {
                return Err(KeyError(format!(
                    "the pinned key of {id:016x} is not the secret's"
                )));
            }
        }
        Ok(Signing { keys: map, secret })
    }

    /// From the `keys` object of a keys file (`{"<hex16>": "<64 hex>"}`) and an optional hex
    /// secret (the driver protocol's `node.signing`).
    pub fn from_json(
        keys: &Value,
        secret: Option<&str>,
        node_id: Option<u64>,
    ) -> Result<Signing, KeyError> {
        let obj = keys
            .as_object()
            .ok_or_else(|| KeyError("keys: not an object".into()))?;
        let mut parsed = Vec::with_capacity(obj.len());
        for (node, key) in obj {
            let id = u64::from_str_radix(node, 16)
                .map_err(|_| KeyError(format!("keys: bad node id {node:?}")))?;
            let k = key
                .as_str()
                .and_then(|s| hex::decode(s).ok())
                .and_then(|b| <[u8; KEY_SIZE]>::try_from(b).ok())
                .ok_or_else(|| KeyError(format!("keys: bad key of {node}")))?;
            parsed.push((id, k));
        }
        let secret = match secret {
            None => None,
            Some(s) => Some(
                hex::decode(s.trim())
                    .ok()
                    .and_then(|b| <[u8; KEY_SIZE]>::try_from(b).ok())
                    .ok_or_else(|| KeyError("secret key: not 64 hex digits".into()))?,
            ),
        };
        Signing::new(&parsed, secret, node_id)
    }

    /// From a keys file `{"version": 1, "keys": {...}}` and an optional file holding the hex
    /// secret seed.
    pub fn load(
        keys_path: &std::path::Path,
        secret_path: Option<&std::path::Path>,
        node_id: Option<u64>,
    ) -> Result<Signing, KeyError> {
        let text = std::fs::read_to_string(keys_path)
            .map_err(|e| KeyError(format!("keys file {}: {e}", keys_path.display())))?;
        let doc: Value = serde_json::from_str(&text)
            .map_err(|e| KeyError(format!("keys file {}: {e}", keys_path.display())))?;
        if doc.get("version").and_then(Value::as_u64) != Some(1) || !doc["keys"].is_object() {
            return Err(KeyError(format!(
                "keys file {}: expected {{\"version\": 1, \"keys\": {{...}}}}",
                keys_path.display()
            )));
        }
        let secret = match secret_path {
            None => None,
            Some(p) => Some(
                std::fs::read_to_string(p)
                    .map_err(|e| KeyError(format!("secret key file {}: {e}", p.display())))?,
            ),
        };
        Signing::from_json(&doc["keys"], secret.as_deref(), node_id)
    }

    /// Whether this node holds its secret key.
    pub fn can_sign(&self) -> bool {
        self.secret.is_some()
    }

    /// The 64-byte signature of an entry (DF-SEC-140); `None` without a secret key.
    #[allow(clippy::too_many_arguments)]
    pub fn sign(
        &self,
        fingerprint: &[u8; 32],
        encoding: ValueEncoding,
        origin: u64,
        incarnation: u64,
        seq: u64,
        indices: &[u32],
        values: &[f32],
    ) -> Option<[u8; SIGNATURE_SIZE]> {
        let sk = self.secret.as_ref()?;
        let m = signed_message(
            fingerprint,
            encoding,
            origin,
            incarnation,
            seq,
            indices,
            values,
        );
        Some(sk.sign(&m).to_bytes())
    }

    /// `Ok` when `signature` is a valid signature by `origin`'s pinned key over the entry's message,
    /// else why not (DF-SEC-142): RFC 8032 verification as `ed25519-dalek`'s `Verifier::verify`
    /// does it (cofactorless equation, S < L).
    #[allow(clippy::too_many_arguments)]
    pub fn verify(
        &self,
        fingerprint: &[u8; 32],
        encoding: ValueEncoding,
        origin: u64,
        incarnation: u64,
        seq: u64,
        indices: &[u32],
        values: &[f32],
        signature: Option<&[u8; SIGNATURE_SIZE]>,
    ) -> Result<(), String> {
        let sig = signature.ok_or("unsigned entry")?;
        let key = self
            .keys
            .get(&origin)
            .ok_or_else(|| format!("no pinned key for origin {origin:016x}"))?;
        let m = signed_message(
            fingerprint,
            encoding,
            origin,
            incarnation,
            seq,
            indices,
            values,
        );
        key.verify(&m, &Signature::from_bytes(sig))
            .map_err(|_| "signature does not verify".to_string())
    }
}
