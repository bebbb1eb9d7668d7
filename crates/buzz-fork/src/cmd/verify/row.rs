//! The cells of `verify`'s report: one typed value per column, decided and
//! counted as values, printed (and kept in the fork-CI JSON report) as the
//! text the table has always shown.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::cargo::{TestRun, TestRunKind};
use crate::mutation::{PatchEvidence, VerdictKind};

/// A cell's text that is none of its column's values (reading a JSON report).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a value of verify's {column} column")]
pub struct CellParseError {
    /// The column.
    column: &'static str,
    /// The text read.
    text: String,
}

impl CellParseError {
    fn new(column: &'static str, text: &str) -> Self {
        CellParseError {
            column,
            text: text.to_owned(),
        }
    }
}

/// Serializes a cell as its [`Display`](fmt::Display) text and reads it back
/// with [`FromStr`], so the JSON report holds what the table shows.
macro_rules! serde_as_text {
    ($($cell:ty),+ $(,)?) => {$(
        impl serde::Serialize for $cell {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> serde::Deserialize<'de> for $cell {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    )+};
}

serde_as_text!(
    PrefixBuild,
    PrefixGuards,
    DefectTests,
    MutationCheck,
    WholeSuite
);

/// One row of the verify report: a patch and what each stage found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyRow {
    /// Patch id.
    pub id: String,
    /// Whether the tree up to the patch builds.
    pub prefix: PrefixBuild,
    /// The patch's guards at its prefix.
    pub guards: PrefixGuards,
    /// The patch's pinned defect tests on the whole tree.
    pub defects: DefectTests,
    /// The mutation check of the patch's guards.
    pub mutation: MutationCheck,
}

impl VerifyRow {
    /// The row before anything ran: nothing built or run yet.
    #[must_use]
    pub fn not_run(id: String, pins_defects: bool) -> Self {
        VerifyRow {
            id,
            prefix: PrefixBuild::Skipped,
            guards: PrefixGuards::Skipped,
            defects: if pins_defects {
                DefectTests::NotRun
            } else {
                DefectTests::NonePinned
            },
            mutation: MutationCheck::NotRun,
        }
    }

    /// The row's cells in the table's column order.
    #[must_use]
    pub fn cells(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.prefix.to_string(),
            self.guards.to_string(),
            self.defects.to_string(),
            self.mutation.to_string(),
        ]
    }
}

/// `prefix build`: whether the tree up to the patch builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefixBuild {
    /// Not built (`--skip-prefix`): `skipped`.
    Skipped,
    /// It builds: `ok`.
    Builds,
    /// It does not build: `FAIL`.
    DoesNotBuild,
}

impl fmt::Display for PrefixBuild {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PrefixBuild::Skipped => "skipped",
            PrefixBuild::Builds => "ok",
            PrefixBuild::DoesNotBuild => "FAIL",
        })
    }
}

impl FromStr for PrefixBuild {
    type Err = CellParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        [
            PrefixBuild::Skipped,
            PrefixBuild::Builds,
            PrefixBuild::DoesNotBuild,
        ]
        .into_iter()
        .find(|cell| cell.to_string() == text)
        .ok_or_else(|| CellParseError::new("prefix build", text))
    }
}

/// `guards`: the patch's guards at its prefix, with the patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrefixGuards {
    /// No prefix was built (`--skip-prefix`): `skipped`.
    Skipped,
    /// The prefix does not build: `not run`.
    NotRun,
    /// They ran: how many ended each way (`1 passed`; `none` for a patch
    /// without guards).
    Ran(RunTally),
}

impl fmt::Display for PrefixGuards {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrefixGuards::Skipped => f.write_str("skipped"),
            PrefixGuards::NotRun => f.write_str("not run"),
            PrefixGuards::Ran(tally) => tally.fmt(f),
        }
    }
}

impl FromStr for PrefixGuards {
    type Err = CellParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "skipped" => Ok(PrefixGuards::Skipped),
            "not run" => Ok(PrefixGuards::NotRun),
            _ => text
                .parse()
                .map(PrefixGuards::Ran)
                .map_err(|_| CellParseError::new("guards", text)),
        }
    }
}

/// How many test runs ended each way: `2 passed, 1 failed` (in the order of
/// the labels), `none` when nothing ran.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunTally(BTreeMap<TestRunKind, usize>);

impl RunTally {
    /// The tally of `runs`.
    pub fn of<'a>(runs: impl IntoIterator<Item = &'a TestRun>) -> Self {
        let mut counts = BTreeMap::new();
        for run in runs {
            *counts.entry(run.kind()).or_default() += 1;
        }
        RunTally(counts)
    }
}

impl fmt::Display for RunTally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        let mut counts: Vec<(&'static str, usize)> =
            self.0.iter().map(|(k, n)| (k.label(), *n)).collect();
        counts.sort_unstable();
        let parts: Vec<String> = counts.iter().map(|(l, n)| format!("{n} {l}")).collect();
        f.write_str(&parts.join(", "))
    }
}

impl FromStr for RunTally {
    type Err = CellParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text == "none" {
            return Ok(RunTally::default());
        }
        let err = || CellParseError::new("guards", text);
        let mut counts = BTreeMap::new();
        for (n, label) in counted(text).ok_or_else(err)? {
            counts.insert(TestRunKind::from_label(label).ok_or_else(err)?, n);
        }
        Ok(RunTally(counts))
    }
}

/// `defects`: the patch's pinned defect tests, each run alone on the whole
/// tree, where it must fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DefectTests {
    /// The patch pins no defect: `none`.
    NonePinned,
    /// The whole tree does not build: `not run`.
    NotRun,
    /// Each test's run, in registry order (`fails as expected, STILL PASSES`).
    Ran(Vec<DefectRun>),
}

impl fmt::Display for DefectTests {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DefectTests::NonePinned => f.write_str("none"),
            DefectTests::NotRun => f.write_str("not run"),
            DefectTests::Ran(runs) => {
                let parts: Vec<String> = runs.iter().map(ToString::to_string).collect();
                f.write_str(&parts.join(", "))
            }
        }
    }
}

impl FromStr for DefectTests {
    type Err = CellParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "none" => Ok(DefectTests::NonePinned),
            "not run" => Ok(DefectTests::NotRun),
            "" => Ok(DefectTests::Ran(Vec::new())),
            _ => text
                .split(", ")
                .map(|run| {
                    DefectRun::ALL
                        .into_iter()
                        .find(|r| r.to_string() == run)
                        .ok_or_else(|| CellParseError::new("defects", text))
                })
                .collect::<Result<_, _>>()
                .map(DefectTests::Ran),
        }
    }
}

/// How one pinned defect test went with its fix applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefectRun {
    /// It fails: the defect is still pinned and the patch fixes it.
    FailsAsExpected,
    /// It passes: the patch does not fix the pinned defect.
    StillPasses,
    /// Its target does not compile.
    CompileFailed,
    /// No test has its name.
    NotFound,
}

impl DefectRun {
    const ALL: [DefectRun; 4] = [
        DefectRun::FailsAsExpected,
        DefectRun::StillPasses,
        DefectRun::CompileFailed,
        DefectRun::NotFound,
    ];
}

impl From<&TestRun> for DefectRun {
    fn from(run: &TestRun) -> Self {
        match run.kind() {
            TestRunKind::Failed => DefectRun::FailsAsExpected,
            TestRunKind::Passed => DefectRun::StillPasses,
            TestRunKind::CompileFailed => DefectRun::CompileFailed,
            TestRunKind::NotFound => DefectRun::NotFound,
        }
    }
}

impl fmt::Display for DefectRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DefectRun::FailsAsExpected => "fails as expected",
            DefectRun::StillPasses => "STILL PASSES",
            DefectRun::CompileFailed => "FAILED TO COMPILE",
            DefectRun::NotFound => "NOT FOUND",
        })
    }
}

/// `mutation`: the mutation check of the patch's guards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MutationCheck {
    /// Not run (no `--mutation`): `not run`.
    NotRun,
    /// The patch has no guards: `no guards`.
    NoGuards,
    /// Every guard proves the patch: `ok: 1 killed, 1 API guard`.
    Passed(GuardVerdicts),
    /// A guard does not: `FAIL: 1 killed, 1 STILL PASSES`.
    Failed(GuardVerdicts),
}

/// How many of a patch's guards got each mutation verdict (in the order
/// first met), and what else left the series with the patch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuardVerdicts {
    /// Each verdict and its number of guards.
    pub counts: Vec<(VerdictKind, usize)>,
    /// Further patches left out with it (see [`PatchEvidence::also_without`]).
    pub also_without: Vec<String>,
}

impl From<&PatchEvidence> for MutationCheck {
    fn from(patch: &PatchEvidence) -> Self {
        if patch.guards.is_empty() {
            return MutationCheck::NoGuards;
        }
        let mut counts: Vec<(VerdictKind, usize)> = Vec::new();
        for g in &patch.guards {
            let kind = g.verdict.kind();
            match counts.iter_mut().find(|(k, _)| *k == kind) {
                Some((_, n)) => *n += 1,
                None => counts.push((kind, 1)),
            }
        }
        let failed = counts.iter().any(|(k, _)| k.is_problem());
        let verdicts = GuardVerdicts {
            counts,
            also_without: patch.also_without.clone(),
        };
        if failed {
            MutationCheck::Failed(verdicts)
        } else {
            MutationCheck::Passed(verdicts)
        }
    }
}

impl fmt::Display for MutationCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (mark, verdicts) = match self {
            MutationCheck::NotRun => return f.write_str("not run"),
            MutationCheck::NoGuards => return f.write_str("no guards"),
            MutationCheck::Passed(v) => ("ok", v),
            MutationCheck::Failed(v) => ("FAIL", v),
        };
        let counts: Vec<String> = verdicts
            .counts
            .iter()
            .map(|(k, n)| format!("{n} {}", k.label()))
            .collect();
        write!(f, "{mark}: {}", counts.join(", "))?;
        if !verdicts.also_without.is_empty() {
            write!(f, " (also without {})", verdicts.also_without.join(", "))?;
        }
        Ok(())
    }
}

impl FromStr for MutationCheck {
    type Err = CellParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = || CellParseError::new("mutation", text);
        let (passed, rest) = match text {
            "not run" => return Ok(MutationCheck::NotRun),
            "no guards" => return Ok(MutationCheck::NoGuards),
            _ => match (text.strip_prefix("ok: "), text.strip_prefix("FAIL: ")) {
                (Some(rest), _) => (true, rest),
                (None, Some(rest)) => (false, rest),
                (None, None) => return Err(err()),
            },
        };
        let (counts, also_without) = match rest.split_once(" (also without ") {
            None => (rest, Vec::new()),
            Some((counts, also)) => {
                let also = also.strip_suffix(')').ok_or_else(err)?;
                (counts, also.split(", ").map(str::to_owned).collect())
            }
        };
        let counts = counted(counts)
            .ok_or_else(err)?
            .into_iter()
            .map(|(n, label)| VerdictKind::from_label(label).map(|k| (k, n)))
            .collect::<Option<_>>()
            .ok_or_else(err)?;
        let verdicts = GuardVerdicts {
            counts,
            also_without,
        };
        Ok(if passed {
            MutationCheck::Passed(verdicts)
        } else {
            MutationCheck::Failed(verdicts)
        })
    }
}

/// `whole test suite`: the whole tree's suite, its defect tests skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WholeSuite {
    /// The whole tree does not build (or the suite has not run yet).
    NotRun,
    /// A test fails.
    Failed,
    /// It passes; the packages left out were built exactly as in the root
    /// workspace, whose own `cargo test --workspace` tests them.
    Passed {
        /// The packages left to the root workspace's tests.
        left_to_root: Vec<String>,
    },
}

impl fmt::Display for WholeSuite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WholeSuite::NotRun => f.write_str("not run (the tree does not build)"),
            WholeSuite::Failed => f.write_str("FAILED"),
            WholeSuite::Passed { left_to_root } if left_to_root.is_empty() => f.write_str("passed"),
            WholeSuite::Passed { left_to_root } => write!(
                f,
                "passed ({} package(s) built as in the root workspace left to its tests: {})",
                left_to_root.len(),
                left_to_root.join(", ")
            ),
        }
    }
}

impl FromStr for WholeSuite {
    type Err = CellParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "not run (the tree does not build)" => Ok(WholeSuite::NotRun),
            "FAILED" => Ok(WholeSuite::Failed),
            "passed" => Ok(WholeSuite::Passed {
                left_to_root: Vec::new(),
            }),
            _ => text
                .strip_prefix("passed (")
                .and_then(|rest| rest.strip_suffix(')'))
                .and_then(|rest| rest.split_once(": "))
                .map(|(_, packages)| WholeSuite::Passed {
                    left_to_root: packages.split(", ").map(str::to_owned).collect(),
                })
                .ok_or_else(|| CellParseError::new("whole test suite", text)),
        }
    }
}

/// Reads `2 passed, 1 failed` as (count, label) pairs.
fn counted(text: &str) -> Option<Vec<(usize, &str)>> {
    text.split(", ")
        .map(|part| {
            let (n, label) = part.split_once(' ')?;
            Some((n.parse().ok()?, label))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cargo::TestRun;
    use crate::libtest::{Failure, FailureKind};
    use crate::mutation::{GuardEvidence, judge};

    fn failed() -> TestRun {
        TestRun::Failed {
            failure: Some(Failure {
                thread: "t".into(),
                location: "tests/e2e/x.rs:10:5".into(),
                message: "assertion failed: resumed".into(),
                kind: FailureKind::Assertion,
            }),
        }
    }

    fn guard(test: &str, with: TestRun, without: TestRun) -> GuardEvidence {
        GuardEvidence {
            test: test.into(),
            verdict: judge(&with, &without, None),
            with_patch: with,
            without_patch: without,
        }
    }

    /// Every cell of `row`, printed and read back.
    fn round_trip(row: &VerifyRow) -> VerifyRow {
        let json = serde_json::to_string(row).unwrap();
        serde_json::from_str(&json).unwrap()
    }

    #[test]
    fn a_row_prints_as_the_table_always_has() {
        let row = VerifyRow {
            id: "session-resume".into(),
            prefix: PrefixBuild::Builds,
            guards: PrefixGuards::Ran(RunTally::of(&[
                TestRun::Passed,
                failed(),
                TestRun::Passed,
                TestRun::CompileFailed,
            ])),
            defects: DefectTests::Ran(vec![
                DefectRun::from(&failed()),
                DefectRun::from(&TestRun::Passed),
                DefectRun::from(&TestRun::NotFound),
            ]),
            mutation: MutationCheck::from(&PatchEvidence {
                id: "session-resume".into(),
                also_without: vec!["pool (no longer applies)".into()],
                guards: vec![guard("t::resumes", TestRun::Passed, failed())],
            }),
        };
        assert_eq!(
            row.cells(),
            [
                "session-resume",
                "ok",
                "1 failed, 1 failed to compile, 2 passed",
                "fails as expected, STILL PASSES, NOT FOUND",
                "ok: 1 killed (also without pool (no longer applies))",
            ]
        );
        assert_eq!(
            serde_json::to_value(&row).unwrap(),
            serde_json::json!({
                "id": "session-resume",
                "prefix": "ok",
                "guards": "1 failed, 1 failed to compile, 2 passed",
                "defects": "fails as expected, STILL PASSES, NOT FOUND",
                "mutation": "ok: 1 killed (also without pool (no longer applies))",
            })
        );
        assert_eq!(round_trip(&row), row);
    }

    #[test]
    fn a_row_before_anything_ran() {
        let row = VerifyRow::not_run("p".into(), true);
        assert_eq!(
            row.cells(),
            ["p", "skipped", "skipped", "not run", "not run"]
        );
        assert_eq!(round_trip(&row), row);
        let row = VerifyRow {
            prefix: PrefixBuild::DoesNotBuild,
            guards: PrefixGuards::NotRun,
            ..VerifyRow::not_run("q".into(), false)
        };
        assert_eq!(row.cells(), ["q", "FAIL", "not run", "none", "not run"]);
        assert_eq!(round_trip(&row), row);
        let none = PrefixGuards::Ran(RunTally::default());
        assert_eq!(none.to_string(), "none");
        assert_eq!("none".parse::<PrefixGuards>(), Ok(none));
    }

    #[test]
    fn a_guard_that_proves_nothing_fails_the_mutation_cell() {
        let patch = PatchEvidence {
            id: "p".into(),
            also_without: vec!["q".into()],
            guards: vec![
                guard("t::resumes", TestRun::Passed, failed()),
                guard("t::api", TestRun::Passed, TestRun::CompileFailed),
            ],
        };
        let cell = MutationCheck::from(&patch);
        assert!(matches!(cell, MutationCheck::Failed(_)), "{cell:?}");
        assert_eq!(
            cell.to_string(),
            "FAIL: 1 killed, 1 does not compile without its patch (also without q)"
        );
        assert_eq!(cell.to_string().parse(), Ok(cell));
        let no_guards = MutationCheck::from(&PatchEvidence {
            guards: Vec::new(),
            ..patch
        });
        assert_eq!(no_guards, MutationCheck::NoGuards);
        assert_eq!(no_guards.to_string(), "no guards");
    }

    #[test]
    fn the_suite_cell_names_what_it_left_to_the_root_workspace() {
        let cells = [
            (WholeSuite::NotRun, "not run (the tree does not build)"),
            (WholeSuite::Failed, "FAILED"),
            (
                WholeSuite::Passed {
                    left_to_root: Vec::new(),
                },
                "passed",
            ),
            (
                WholeSuite::Passed {
                    left_to_root: vec!["a".into(), "b".into()],
                },
                "passed (2 package(s) built as in the root workspace left to its tests: a, b)",
            ),
        ];
        for (suite, text) in cells {
            assert_eq!(suite.to_string(), text);
            assert_eq!(text.parse(), Ok(suite));
        }
    }

    #[test]
    fn text_that_is_no_cell_is_refused() {
        assert_eq!(
            "fine".parse::<PrefixBuild>(),
            Err(CellParseError::new("prefix build", "fine"))
        );
        assert!("2 exploded".parse::<PrefixGuards>().is_err());
        assert!("fails sometimes".parse::<DefectTests>().is_err());
        assert!("ok: 1 vanished".parse::<MutationCheck>().is_err());
        assert!(
            "ok: 1 killed (also without q"
                .parse::<MutationCheck>()
                .is_err()
        );
        assert!("passed (soon)".parse::<WholeSuite>().is_err());
        let err = serde_json::from_str::<VerifyRow>(
            r#"{"id":"p","prefix":"yes","guards":"none","defects":"none","mutation":"not run"}"#,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("`yes` is not a value of verify's prefix build column"),
            "{err}"
        );
    }
}
