//! The owner's attestation of the agent's key (a NIP-OA auth tag), sent with every REST request.
//!
//! The operator gives it as `--auth-tag` / `BUZZ_AUTH_TAG`: the JSON of a Nostr tag,
//! `["auth", <owner's public key, 64 hex>, <conditions>, <owner's signature, 128 hex>]`, which
//! the owner made when the agent was created. The relay reads it from the `x-auth-tag` header
//! of a REST request to admit the agent where membership comes through its owner (a
//! members-only relay answers 403 `relay_membership_required` to a request without it;
//! upstream-facts §10). The header carries it alone: it is not one of the NIP-98 event's tags.
//!
//! The harness does not verify the signature: that is the relay's check, by a rule the harness
//! has no use for. It checks the shape, so a mistyped value is a clear error when the harness
//! starts rather than a refusal on its first reply.

use nostr::PublicKey;

/// Why an `--auth-tag` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthTagError {
    /// Not a JSON array of strings.
    #[error("expected the JSON of a tag, [\"auth\", owner, conditions, signature]: {0}")]
    NotJson(String),
    /// A tag of another name.
    #[error("expected an \"auth\" tag, got {0:?}")]
    NotAuth(String),
    /// Not four elements.
    #[error("expected 4 elements (\"auth\", owner, conditions, signature), got {0}")]
    Length(usize),
    /// The owner is not a public key.
    #[error("the owner (second element) is not a public key of 64 hex characters: {0:?}")]
    Owner(String),
    /// The signature is not 64 bytes of hex.
    #[error("the signature (fourth element) is not 128 hex characters")]
    Signature,
}

/// A well-formed auth tag. `Debug` names the owner only.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthTag {
    /// The tag's JSON on one line, as the header carries it.
    header: String,
    owner: PublicKey,
}

impl std::fmt::Debug for AuthTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AuthTag(owner {})", self.owner.to_hex())
    }
}

impl AuthTag {
    /// Reads the JSON of an auth tag.
    pub fn parse(raw: &str) -> Result<AuthTag, AuthTagError> {
        let parts: Vec<String> =
            serde_json::from_str(raw.trim()).map_err(|e| AuthTagError::NotJson(e.to_string()))?;
        if parts.first().map(String::as_str) != Some("auth") {
            return Err(AuthTagError::NotAuth(
                parts.first().cloned().unwrap_or_default(),
            ));
        }
        if parts.len() != 4 {
            return Err(AuthTagError::Length(parts.len()));
        }
        let owner = &parts[1];
        let owner = (owner.len() == 64)
            .then(|| PublicKey::from_hex(owner).ok())
            .flatten()
            .ok_or_else(|| AuthTagError::Owner(owner.clone()))?;
        let signature = &parts[3];
        if signature.len() != 128 || hex::decode(signature).is_err() {
            return Err(AuthTagError::Signature);
        }
        let header =
            serde_json::to_string(&parts).map_err(|e| AuthTagError::NotJson(e.to_string()))?;
        Ok(AuthTag { header, owner })
    }

    /// The `x-auth-tag` header's value: the tag's JSON on one line.
    pub fn header_value(&self) -> &str {
        &self.header
    }

    /// The owner the tag names.
    pub fn owner(&self) -> PublicKey {
        self.owner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWNER: &str = "79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798";

    fn tag(owner: &str, signature: &str) -> String {
        format!(r#"["auth", "{owner}", "kind=9", "{signature}"]"#)
    }

    #[test]
    fn a_well_formed_tag_is_kept_on_one_line() {
        let raw = format!("  {}\n", tag(OWNER, &"ab".repeat(64)));
        let parsed = AuthTag::parse(&raw).unwrap();
        assert_eq!(parsed.owner().to_hex(), OWNER);
        assert_eq!(
            parsed.header_value(),
            format!(r#"["auth","{OWNER}","kind=9","{}"]"#, "ab".repeat(64))
        );
        assert!(
            !format!("{parsed:?}").contains("abab"),
            "Debug hides the signature"
        );
    }

    #[test]
    fn each_malformed_tag_says_what_is_wrong() {
        let sig = "ab".repeat(64);
        let cases = [
            ("auth".to_owned(), "expected the JSON of a tag"),
            (
                r#"["p", "x", "y", "z"]"#.to_owned(),
                "expected an \"auth\" tag",
            ),
            (
                format!(r#"["auth", "{OWNER}", "{sig}"]"#),
                "expected 4 elements",
            ),
            (tag("npub1xyz", &sig), "not a public key"),
            (tag(OWNER, "abc"), "not 128 hex"),
            (tag(OWNER, &"zz".repeat(64)), "not 128 hex"),
        ];
        for (raw, expected) in cases {
            let error = AuthTag::parse(&raw).unwrap_err().to_string();
            assert!(error.contains(expected), "{raw}: {error}");
        }
    }
}
