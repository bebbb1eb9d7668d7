//! How `sync` classifies one patch on a new upstream: a pure function from
//! what was observed ([`Facts`]) to the patch's status ([`decide`]), and
//! from both to its line in the report ([`describe`]).
//!
//! The observations (made by `sync` with git, in this order):
//!
//! 1. does the reverse of the patch apply to the new base? (upstream has it)
//! 2. the forward application: exactly, at shifted lines, by a 3-way merge
//!    of the old patch commit, or conflicting;
//! 3. for a conflict: does the reverse of its combined change with later
//!    patches apply? (upstream took it together with a later rewrite);
//! 4. does the maintainer's resolution, committed in the work repo after an
//!    earlier blocked sync, merge cleanly?
//! 5. the tree the patch leaves (the resolution's, else the forward one):
//!    unchanged from the base, or changed with some required symbols or
//!    seams missing.
//!
//! The rules, first match wins:
//!
//! | observed | status | re-applied |
//! |---|---|---|
//! | the reverse applies | `already-upstream` | no |
//! | conflict, no resolution, upstream took it with later patches | `already-upstream` | no |
//! | conflict, no resolution | `conflict` | no |
//! | the tree it leaves equals the base | `empty` | no |
//! | guards missing in the tree it leaves | `guard-failed` | yes |
//! | a resolution of a conflict, or a 3-way merge | `merged` | yes |
//! | shifted lines | `offset` | yes |
//! | otherwise | `exact` | yes |

use serde::{Deserialize, Serialize};

/// Per-patch classification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyncStatus {
    /// Upstream already contains the change.
    AlreadyUpstream,
    /// Applies at the stated lines.
    Exact,
    /// Applies at shifted lines.
    Offset,
    /// Needed a 3-way merge (or a maintainer's resolution).
    Merged,
    /// Conflicts.
    Conflict,
    /// Applies but changes nothing.
    Empty,
    /// Applies but its guards are gone.
    GuardFailed,
}

impl SyncStatus {
    /// Report spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            SyncStatus::AlreadyUpstream => "already-upstream",
            SyncStatus::Exact => "exact",
            SyncStatus::Offset => "offset",
            SyncStatus::Merged => "merged",
            SyncStatus::Conflict => "conflict",
            SyncStatus::Empty => "empty",
            SyncStatus::GuardFailed => "guard-failed",
        }
    }

    /// Whether this status stops the sync (and names the patch in `ci`'s
    /// one-line summary).
    #[must_use]
    pub fn blocks(self) -> bool {
        matches!(self, SyncStatus::Conflict | SyncStatus::GuardFailed)
    }
}

/// How the patch's forward application on the new base went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forward {
    /// Every hunk at its stated line.
    Exact,
    /// Applied, some hunks at shifted lines (`path hunk #n @@…@@ offset +d`).
    Shifted(Vec<String>),
    /// Plain application failed; a 3-way merge of the old commit worked.
    Merged,
    /// The 3-way merge conflicts in these files, at these hunks.
    Conflicted {
        /// Conflicted files.
        files: Vec<String>,
        /// The failing hunks of those files.
        hunks: Vec<String>,
    },
}

/// The tree the patch leaves on the new base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leaves {
    /// The same tree as the base: the patch changes nothing.
    Unchanged,
    /// A changed tree, with the required symbols and seams missing there.
    Changed {
        /// One message per missing symbol or seam.
        missing_guards: Vec<String>,
    },
}

/// Everything `sync` observed about one patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// The patch id.
    pub id: String,
    /// The files the patch touches.
    pub files: Vec<String>,
    /// The reverse of the patch applies to the new base.
    pub reverse_applies: bool,
    /// The forward application (`None` when not tried: the reverse applied).
    pub forward: Option<Forward>,
    /// For a conflict: the later patches whose combined change with this
    /// one upstream already has.
    pub taken_with_later: Option<Vec<String>>,
    /// The maintainer's resolution commit (short id), when one exists and
    /// merges cleanly onto the new base.
    pub resolution: Option<String>,
    /// The tree the patch leaves (`None` when it leaves none: a conflict
    /// without a resolution, or upstream has it).
    pub leaves: Option<Leaves>,
}

/// A patch's status, and whether it is re-applied (stacked into the new
/// series, so later patches are classified on top of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The classification.
    pub status: SyncStatus,
    /// Whether the patch's tree goes into the new series.
    pub reapplied: bool,
}

fn decision(status: SyncStatus, reapplied: bool) -> Decision {
    Decision { status, reapplied }
}

/// The status of one patch: the rules in the module documentation.
#[must_use]
pub fn decide(facts: &Facts) -> Decision {
    if facts.reverse_applies {
        return decision(SyncStatus::AlreadyUpstream, false);
    }
    let conflicted = matches!(facts.forward, Some(Forward::Conflicted { .. }));
    if conflicted && facts.resolution.is_none() {
        return if facts.taken_with_later.is_some() {
            decision(SyncStatus::AlreadyUpstream, false)
        } else {
            decision(SyncStatus::Conflict, false)
        };
    }
    match &facts.leaves {
        None => decision(SyncStatus::Conflict, false),
        Some(Leaves::Unchanged) => decision(SyncStatus::Empty, false),
        Some(Leaves::Changed { missing_guards }) if !missing_guards.is_empty() => {
            decision(SyncStatus::GuardFailed, true)
        }
        Some(Leaves::Changed { .. }) => match &facts.forward {
            _ if conflicted => decision(SyncStatus::Merged, true),
            Some(Forward::Merged) => decision(SyncStatus::Merged, true),
            Some(Forward::Shifted(_)) => decision(SyncStatus::Offset, true),
            _ => decision(SyncStatus::Exact, true),
        },
    }
}

/// What the report says about one patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Description {
    /// Files concerned (conflicted files for a conflict, else touched files).
    pub files: Vec<String>,
    /// Hunks concerned (failing hunks of a conflict, shifted hunks of an offset).
    pub hunks: Vec<String>,
    /// Explanation.
    pub detail: Option<String>,
}

/// The report's files, hunks and explanation for a decided patch.
#[must_use]
pub fn describe(facts: &Facts, decision: Decision) -> Description {
    let (forward_hunks, conflicted_files) = match &facts.forward {
        Some(Forward::Shifted(hunks)) => (hunks.clone(), None),
        Some(Forward::Conflicted { files, hunks }) => (hunks.clone(), Some(files.clone())),
        _ => (Vec::new(), None),
    };
    let forward_detail = match &facts.forward {
        Some(Forward::Shifted(_)) => {
            Some("applies at shifted lines; --write re-exports it at the new positions".to_owned())
        }
        Some(Forward::Merged) => Some(
            "context changed upstream; a 3-way merge re-applied the patch (review the range-diff)"
                .to_owned(),
        ),
        _ => None,
    };
    let with_resolution = |before: Option<String>| match &facts.resolution {
        None => before,
        Some(commit) => Some(format!(
            "{}using the resolution committed in the work repo ({commit})",
            before.map_or(String::new(), |b| format!("{b}; "))
        )),
    };
    let touched = Description {
        files: facts.files.clone(),
        hunks: forward_hunks.clone(),
        detail: None,
    };
    match decision.status {
        SyncStatus::AlreadyUpstream => Description {
            hunks: Vec::new(),
            detail: Some(match &facts.taken_with_later {
                Some(later) if !facts.reverse_applies => format!(
                    "upstream has it together with the later {}: the reverse of their combined change applies (sync --write retires it as upstreamed)",
                    later.join(", ")
                ),
                _ => "the reverse of the patch applies: upstream already contains this change (sync --write retires it as upstreamed)".to_owned(),
            }),
            ..touched
        },
        SyncStatus::Conflict => {
            let files = conflicted_files.unwrap_or_else(|| facts.files.clone());
            Description {
                detail: Some(format!(
                    "patch {} conflicts with the new upstream in {}; resolve it in the work repo (docs/MAINTENANCE.md)",
                    facts.id,
                    files.join(", ")
                )),
                files,
                ..touched
            }
        }
        SyncStatus::Empty => Description {
            detail: Some(
                "applies but changes nothing: upstream already has the effect (sync --write retires it as upstreamed)"
                    .to_owned(),
            ),
            ..touched
        },
        SyncStatus::GuardFailed => {
            let missing = match &facts.leaves {
                Some(Leaves::Changed { missing_guards }) => missing_guards.join("; "),
                _ => String::new(),
            };
            Description {
                detail: Some(format!(
                    "applies, but its guards are gone: {missing} (upstream renamed or removed what the patch relies on; adapt the patch in the work repo)"
                )),
                ..touched
            }
        }
        SyncStatus::Merged if conflicted_files.is_some() => Description {
            detail: with_resolution(Some("conflicted with the new upstream".to_owned())),
            ..touched
        },
        SyncStatus::Merged | SyncStatus::Offset | SyncStatus::Exact => Description {
            detail: with_resolution(forward_detail),
            ..touched
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> Facts {
        Facts {
            id: "p".into(),
            files: vec!["c/src/pool.rs".into()],
            reverse_applies: false,
            forward: Some(Forward::Exact),
            taken_with_later: None,
            resolution: None,
            leaves: Some(Leaves::Changed {
                missing_guards: Vec::new(),
            }),
        }
    }

    fn conflicted() -> Forward {
        Forward::Conflicted {
            files: vec!["c/src/pool.rs".into()],
            hunks: vec!["c/src/pool.rs hunk #1 @@ -1,2 +1,3 @@".into()],
        }
    }

    fn missing() -> Leaves {
        Leaves::Changed {
            missing_guards: vec!["required symbol Pool::x is not defined in c/src/pool.rs".into()],
        }
    }

    #[test]
    fn the_rules_in_order() {
        use SyncStatus::*;
        let shifted = Forward::Shifted(vec![
            "c/src/pool.rs hunk #1 @@ -1,2 +1,3 @@ offset +2".into(),
        ]);
        #[rustfmt::skip]
        let table: Vec<(&str, Facts, SyncStatus, bool)> = vec![
            ("applies exactly", facts(), Exact, true),
            ("shifted", Facts { forward: Some(shifted.clone()), ..facts() }, Offset, true),
            ("3-way merge", Facts { forward: Some(Forward::Merged), ..facts() }, Merged, true),
            ("reverse applies", Facts { reverse_applies: true, forward: None, leaves: None, ..facts() }, AlreadyUpstream, false),
            ("reverse wins over anything", Facts { reverse_applies: true, leaves: Some(missing()), ..facts() }, AlreadyUpstream, false),
            ("conflict", Facts { forward: Some(conflicted()), leaves: None, ..facts() }, Conflict, false),
            ("conflict taken with later", Facts { forward: Some(conflicted()), taken_with_later: Some(vec!["q".into()]), leaves: None, ..facts() }, AlreadyUpstream, false),
            ("conflict resolved", Facts { forward: Some(conflicted()), resolution: Some("abc1234".into()), ..facts() }, Merged, true),
            ("a resolution wins over taken-with-later", Facts { forward: Some(conflicted()), resolution: Some("abc1234".into()), taken_with_later: Some(vec!["q".into()]), ..facts() }, Merged, true),
            ("resolved but changes nothing", Facts { forward: Some(conflicted()), resolution: Some("abc1234".into()), leaves: Some(Leaves::Unchanged), ..facts() }, Empty, false),
            ("changes nothing", Facts { leaves: Some(Leaves::Unchanged), ..facts() }, Empty, false),
            ("shifted, changes nothing", Facts { forward: Some(shifted.clone()), leaves: Some(Leaves::Unchanged), ..facts() }, Empty, false),
            ("guards gone", Facts { leaves: Some(missing()), ..facts() }, GuardFailed, true),
            ("shifted, guards gone", Facts { forward: Some(shifted), leaves: Some(missing()), ..facts() }, GuardFailed, true),
            ("empty wins over guards", Facts { leaves: Some(Leaves::Unchanged), ..facts() }, Empty, false),
            ("resolution of a clean patch keeps its fit", Facts { resolution: Some("abc1234".into()), ..facts() }, Exact, true),
        ];
        for (name, f, status, reapplied) in table {
            let d = decide(&f);
            assert_eq!((d.status, d.reapplied), (status, reapplied), "{name}");
        }
    }

    #[test]
    fn descriptions_name_files_hunks_and_why() {
        let f = Facts {
            forward: Some(conflicted()),
            leaves: None,
            ..facts()
        };
        let d = describe(&f, decide(&f));
        assert_eq!(d.files, ["c/src/pool.rs"]);
        assert_eq!(d.hunks, ["c/src/pool.rs hunk #1 @@ -1,2 +1,3 @@"]);
        assert_eq!(
            d.detail.as_deref(),
            Some(
                "patch p conflicts with the new upstream in c/src/pool.rs; resolve it in the work repo (docs/MAINTENANCE.md)"
            )
        );
        let f = Facts {
            resolution: Some("abc1234".into()),
            leaves: facts().leaves,
            ..f
        };
        let d = describe(&f, decide(&f));
        assert_eq!(
            d.detail.as_deref(),
            Some(
                "conflicted with the new upstream; using the resolution committed in the work repo (abc1234)"
            )
        );
        let f = Facts {
            forward: Some(conflicted()),
            taken_with_later: Some(vec!["q".into(), "r".into()]),
            leaves: None,
            ..facts()
        };
        let d = describe(&f, decide(&f));
        assert!(d.hunks.is_empty());
        assert!(
            d.detail
                .as_deref()
                .unwrap()
                .starts_with("upstream has it together with the later q, r:")
        );
        let f = Facts {
            leaves: Some(missing()),
            ..facts()
        };
        assert!(
            describe(&f, decide(&f))
                .detail
                .unwrap()
                .contains("its guards are gone: required symbol Pool::x is not defined")
        );
        assert_eq!(describe(&facts(), decide(&facts())).detail, None);
    }
}
