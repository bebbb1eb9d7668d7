//! The mutation check's rule and its evidence.
//!
//! A guard proves its patch only when it *fails by an assertion without
//! it*: with its patch the guard passes; with the patch taken out of the
//! series (with the patches that depend on it, in the same environment) the
//! guard compiles and a test assertion fails, or an insta snapshot no
//! longer matches. The failing assertion (file, line and message, read from
//! libtest's output) is the evidence. A test that panics otherwise (an
//! `expect` in a helper, say) counts too, but the evidence calls it a
//! panic, so a reader sees when a guard dies of something other than an
//! assertion about behaviour (e.g. the unpatched binary rejecting a flag).
//! The evidence is kept per guard in
//! `target/fork-work/mutation.json` and rendered as Markdown
//! (`target/fork-work/mutation.md`, and wherever `--mutation-report` puts a
//! copy to commit).
//!
//! A guard that does not even compile without its patch proves only that
//! the patch's API exists, not what it does: it fails the check, unless the
//! registry names it an API guard with a reason (`api_guards`); then it is
//! reported as such, never as a behavioural proof.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::cargo::TestRun as GuardRun;
use crate::libtest::{Failure, FailureKind};

/// What the mutation check concludes about one guard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Verdict {
    /// It passes with its patch and fails by an assertion without it.
    Killed {
        /// The assertion that failed without the patch.
        failure: Failure,
    },
    /// It does not compile without its patch, and the registry says why
    /// that is all it proves.
    ApiGuard {
        /// The registry's reason.
        reason: String,
    },
    /// It does not compile without its patch (and is no declared API
    /// guard): it proves no behaviour.
    DoesNotCompileWithout,
    /// It still passes without its patch.
    StillPasses,
    /// It fails without its patch, but no assertion failed (a crash, a
    /// timeout, an abort).
    FailsWithoutAssertion,
    /// It does not pass with its patch, so failing without it proves
    /// nothing.
    FailsWithPatch {
        /// How it went with the patch.
        with_patch: String,
    },
    /// No test has the guard's name.
    NotFound,
}

impl Verdict {
    /// Which verdict it is, without its evidence.
    #[must_use]
    pub fn kind(&self) -> VerdictKind {
        match self {
            Verdict::Killed { .. } => VerdictKind::Killed,
            Verdict::ApiGuard { .. } => VerdictKind::ApiGuard,
            Verdict::DoesNotCompileWithout => VerdictKind::DoesNotCompileWithout,
            Verdict::StillPasses => VerdictKind::StillPasses,
            Verdict::FailsWithoutAssertion => VerdictKind::FailsWithoutAssertion,
            Verdict::FailsWithPatch { .. } => VerdictKind::FailsWithPatch,
            Verdict::NotFound => VerdictKind::NotFound,
        }
    }

    /// Whether the verdict fails the mutation check.
    #[must_use]
    pub fn is_problem(&self) -> bool {
        self.kind().is_problem()
    }

    /// Short label for tables.
    #[must_use]
    pub fn label(&self) -> &'static str {
        self.kind().label()
    }

    /// The problem line for `verify`'s report (`None` for a good verdict).
    #[must_use]
    pub fn problem(&self, patch: &str, guard: &str) -> Option<String> {
        let why = match self {
            Verdict::Killed { .. } | Verdict::ApiGuard { .. } => return None,
            Verdict::DoesNotCompileWithout => {
                "does not compile without its patch: it proves the patch's API, not its behaviour \
                 (make it fail by an assertion, or list it in api_guards with a reason)"
                    .to_owned()
            }
            Verdict::StillPasses => {
                "still PASSES without the patch: it does not guard it".to_owned()
            }
            Verdict::FailsWithoutAssertion => {
                "fails without its patch, but no assertion failed (libtest printed no panic)"
                    .to_owned()
            }
            Verdict::FailsWithPatch { with_patch } => {
                format!("proves nothing: it {with_patch} with its patch")
            }
            Verdict::NotFound => "not found".to_owned(),
        };
        Some(format!("[{patch}] guard {guard} {why}"))
    }
}

/// A [`Verdict`] without its evidence: what `verify`'s table counts guards by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VerdictKind {
    /// See [`Verdict::Killed`].
    Killed,
    /// See [`Verdict::ApiGuard`].
    ApiGuard,
    /// See [`Verdict::DoesNotCompileWithout`].
    DoesNotCompileWithout,
    /// See [`Verdict::StillPasses`].
    StillPasses,
    /// See [`Verdict::FailsWithoutAssertion`].
    FailsWithoutAssertion,
    /// See [`Verdict::FailsWithPatch`].
    FailsWithPatch,
    /// See [`Verdict::NotFound`].
    NotFound,
}

impl VerdictKind {
    /// Every kind.
    pub const ALL: [VerdictKind; 7] = [
        VerdictKind::Killed,
        VerdictKind::ApiGuard,
        VerdictKind::DoesNotCompileWithout,
        VerdictKind::StillPasses,
        VerdictKind::FailsWithoutAssertion,
        VerdictKind::FailsWithPatch,
        VerdictKind::NotFound,
    ];

    /// Whether a guard with this verdict fails the mutation check.
    #[must_use]
    pub fn is_problem(self) -> bool {
        !matches!(self, VerdictKind::Killed | VerdictKind::ApiGuard)
    }

    /// Short label for tables.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            VerdictKind::Killed => "killed",
            VerdictKind::ApiGuard => "API guard",
            VerdictKind::DoesNotCompileWithout => "does not compile without its patch",
            VerdictKind::StillPasses => "STILL PASSES",
            VerdictKind::FailsWithoutAssertion => "fails without an assertion",
            VerdictKind::FailsWithPatch => "fails with its patch",
            VerdictKind::NotFound => "not found",
        }
    }

    /// The kind whose [`label`](Self::label) is `label`.
    #[must_use]
    pub fn from_label(label: &str) -> Option<VerdictKind> {
        Self::ALL.into_iter().find(|k| k.label() == label)
    }
}

/// The rule: from the guard's run with its patch, its run without it, and
/// the registry's API-guard reason for it (if any), the verdict.
#[must_use]
pub fn judge(with_patch: &GuardRun, without: &GuardRun, api_reason: Option<&str>) -> Verdict {
    match (with_patch, without) {
        (GuardRun::NotFound, _) | (_, GuardRun::NotFound) => Verdict::NotFound,
        (GuardRun::Passed, GuardRun::Failed { failure: Some(f) }) => {
            Verdict::Killed { failure: f.clone() }
        }
        (GuardRun::Passed, GuardRun::Failed { failure: None }) => Verdict::FailsWithoutAssertion,
        (GuardRun::Passed, GuardRun::Passed) => Verdict::StillPasses,
        (GuardRun::Passed, GuardRun::CompileFailed) => match api_reason {
            Some(reason) => Verdict::ApiGuard {
                reason: reason.to_owned(),
            },
            None => Verdict::DoesNotCompileWithout,
        },
        (other, _) => Verdict::FailsWithPatch {
            with_patch: other.label().to_owned(),
        },
    }
}

/// One guard's evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardEvidence {
    /// `<test target>::<fn>`.
    pub test: String,
    /// Its run with the patch.
    pub with_patch: GuardRun,
    /// Its run without the patch.
    pub without_patch: GuardRun,
    /// The conclusion.
    pub verdict: Verdict,
}

/// One patch's part of the mutation check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchEvidence {
    /// Patch id.
    pub id: String,
    /// Further patches left out with it: those that depend on it, and those
    /// that no longer apply without it.
    pub also_without: Vec<String>,
    /// Every guard.
    pub guards: Vec<GuardEvidence>,
}

/// The mutation check's evidence for the whole series.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MutationReport {
    /// The upstream crate and version the series was verified on.
    pub upstream: String,
    /// Every active patch, in order.
    pub patches: Vec<PatchEvidence>,
}

impl MutationReport {
    /// Pretty JSON with a trailing newline.
    #[must_use]
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }

    /// The Markdown rendering: a summary table, then per patch its guards
    /// with the assertion each one fails by without the patch. Patch pages
    /// link to `#<patch id>`.
    #[must_use]
    pub fn to_markdown(&self) -> String {
        let mut m = String::new();
        let _ = writeln!(m, "# Mutation report");
        m.push('\n');
        let _ = writeln!(
            m,
            "<!-- Written by `scripts/fork verify --mutation --mutation-report FILE`; do not edit by hand. -->"
        );
        m.push('\n');
        let _ = writeln!(
            m,
            "Each guard passes with its patch and, with the patch (and the patches that depend on it) taken out of the \
             series, compiles and fails by a test assertion or a snapshot mismatch: that failure is the evidence below \
             (a guard that dies of another panic is counted apart: read its message). \
             A guard that only fails to compile without its patch proves the patch's API, not its behaviour. \
             Verified on {}.",
            self.upstream
        );
        m.push('\n');
        if self.patches.is_empty() {
            let _ = writeln!(m, "The series is empty.");
            return m;
        }
        let _ = writeln!(
            m,
            "| patch | guards | killed by an assertion | killed by another panic | API guards | problems |"
        );
        let _ = writeln!(
            m,
            "|-------|-------:|-----------------------:|------------------------:|-----------:|---------:|"
        );
        for p in &self.patches {
            let count = |f: fn(&Verdict) -> bool| p.guards.iter().filter(|g| f(&g.verdict)).count();
            let _ = writeln!(
                m,
                "| [`{}`](#{}) | {} | {} | {} | {} | {} |",
                p.id,
                p.id,
                p.guards.len(),
                count(
                    |v| matches!(v, Verdict::Killed { failure } if failure.kind != FailureKind::Panic)
                ),
                count(
                    |v| matches!(v, Verdict::Killed { failure } if failure.kind == FailureKind::Panic)
                ),
                count(|v| matches!(v, Verdict::ApiGuard { .. })),
                count(Verdict::is_problem)
            );
        }
        for p in &self.patches {
            m.push('\n');
            let _ = writeln!(m, "## {}", p.id);
            m.push('\n');
            if p.also_without.is_empty() {
                let _ = writeln!(m, "Without `{}`.", p.id);
            } else {
                let _ = writeln!(
                    m,
                    "Without `{}`, and without {}.",
                    p.id,
                    p.also_without
                        .iter()
                        .map(|a| format!("`{a}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            m.push('\n');
            let _ = writeln!(m, "| guard | with the patch | without it | evidence |");
            let _ = writeln!(m, "|-------|----------------|------------|----------|");
            for g in &p.guards {
                let evidence = match &g.verdict {
                    Verdict::Killed { failure } => format!(
                        "{} at `{}`",
                        match failure.kind {
                            FailureKind::Assertion => "assertion",
                            FailureKind::Panic => "panic",
                            FailureKind::SnapshotMismatch => "snapshot mismatch",
                        },
                        failure.location
                    ),
                    Verdict::ApiGuard { reason } => format!("API guard: {}", cell(reason)),
                    other => format!("**{}**", other.label()),
                };
                let _ = writeln!(
                    m,
                    "| `{}` | {} | {} | {} |",
                    g.test,
                    g.with_patch.label(),
                    g.without_patch.label(),
                    evidence
                );
            }
            for g in &p.guards {
                if let Verdict::Killed { failure } = &g.verdict {
                    m.push('\n');
                    let _ = writeln!(
                        m,
                        "`{}` without the patch, at `{}`:",
                        g.test, failure.location
                    );
                    m.push('\n');
                    let _ = writeln!(m, "```text");
                    let _ = writeln!(m, "{}", failure.message.replace("```", "'''"));
                    let _ = writeln!(m, "```");
                }
            }
        }
        m
    }
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure() -> Failure {
        Failure {
            thread: "t".into(),
            location: "tests/e2e/x.rs:10:5".into(),
            message: "assertion failed: resumed".into(),
            kind: FailureKind::Assertion,
        }
    }

    #[test]
    fn only_an_assertion_without_the_patch_is_a_kill() {
        let failed = GuardRun::Failed {
            failure: Some(failure()),
        };
        let crashed = GuardRun::Failed { failure: None };
        #[rustfmt::skip]
        let table: Vec<(GuardRun, GuardRun, Option<&str>, &str, bool)> = vec![
            (GuardRun::Passed, failed.clone(), None, "killed", false),
            (GuardRun::Passed, failed.clone(), Some("why"), "killed", false),
            (GuardRun::Passed, GuardRun::CompileFailed, None, "does not compile without its patch", true),
            (GuardRun::Passed, GuardRun::CompileFailed, Some("the API is the point"), "API guard", false),
            (GuardRun::Passed, GuardRun::Passed, None, "STILL PASSES", true),
            (GuardRun::Passed, crashed, None, "fails without an assertion", true),
            (failed.clone(), failed.clone(), None, "fails with its patch", true),
            (GuardRun::CompileFailed, GuardRun::CompileFailed, Some("x"), "fails with its patch", true),
            (GuardRun::Passed, GuardRun::NotFound, None, "not found", true),
        ];
        for (with, without, api, label, problem) in table {
            let v = judge(&with, &without, api);
            assert_eq!(
                (v.label(), v.is_problem()),
                (label, problem),
                "{with:?} / {without:?} / {api:?}"
            );
        }
    }

    #[test]
    fn the_report_names_each_guards_assertion() {
        let report = MutationReport {
            upstream: "up 0.9.0".into(),
            patches: vec![PatchEvidence {
                id: "p".into(),
                also_without: vec!["q".into()],
                guards: vec![
                    GuardEvidence {
                        test: "t::resumes".into(),
                        with_patch: GuardRun::Passed,
                        without_patch: GuardRun::Failed {
                            failure: Some(failure()),
                        },
                        verdict: judge(
                            &GuardRun::Passed,
                            &GuardRun::Failed {
                                failure: Some(failure()),
                            },
                            None,
                        ),
                    },
                    GuardEvidence {
                        test: "t::api".into(),
                        with_patch: GuardRun::Passed,
                        without_patch: GuardRun::CompileFailed,
                        verdict: judge(&GuardRun::Passed, &GuardRun::CompileFailed, None),
                    },
                ],
            }],
        };
        let md = report.to_markdown();
        assert!(
            md.contains("| `t::resumes` | passed | failed | assertion at `tests/e2e/x.rs:10:5` |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| `t::api` | passed | failed to compile | **does not compile without its patch** |"
            ),
            "{md}"
        );
        assert!(
            md.contains("```text\nassertion failed: resumed\n```"),
            "{md}"
        );
        // Every row of the summary table has the header's columns.
        let summary: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).take(3).collect();
        let columns = |l: &str| l.matches(" | ").count();
        assert_eq!(columns(summary[0]), columns(summary[2]), "{md}");
        let back: MutationReport = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(back, report);
    }
}
