//! Upstream first: before fork CI applies the series to a new upstream, it
//! builds the new upstream crate (and the sibling crates of a workspace
//! baseline) on its own and runs its own tests. A test that fails is run
//! once more on its own: one that passes then is *flaky*, one that fails
//! again is *broken*. Any broken test (or tests that do not build) makes
//! the verdict `upstream-broken`: the failure is upstream's, and no patch
//! is blamed for it.

use serde::{Deserialize, Serialize};

use crate::cargo::{Cargo, TargetKind, is_library};
use crate::error::Result;
use crate::libtest;
use crate::ui;

/// Upstream's own test run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamRun {
    /// The packages whose tests ran.
    pub packages: Vec<String>,
    /// Test targets that did not compile (`package::target`).
    pub not_built: Vec<String>,
    /// Tests that failed twice (`package::target::name`), or targets whose
    /// run failed without naming a failed test.
    pub broken: Vec<String>,
    /// Tests that failed once and passed when run again.
    pub flaky: Vec<String>,
}

impl UpstreamRun {
    /// Whether upstream fails on its own.
    #[must_use]
    pub fn is_broken(&self) -> bool {
        !self.not_built.is_empty() || !self.broken.is_empty()
    }

    /// One line: `passed`, `passed (flaky: …)` or what is broken.
    #[must_use]
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if !self.not_built.is_empty() {
            parts.push(format!("does not build {}", self.not_built.join(", ")));
        }
        if !self.broken.is_empty() {
            parts.push(format!("fails {}", self.broken.join(", ")));
        }
        let mut out = if parts.is_empty() {
            "passed".to_owned()
        } else {
            parts.join("; ")
        };
        if !self.flaky.is_empty() {
            out.push_str(&format!(
                " (flaky, passed when run again: {})",
                self.flaky.join(", ")
            ));
        }
        out
    }
}

/// One test target of a package and the cargo arguments that select it.
struct Target {
    label: String,
    selection: Vec<String>,
}

fn targets(cargo: &Cargo, package: &str) -> Result<Vec<Target>> {
    let mut out = Vec::new();
    let mut has_lib = false;
    for (kind, name) in cargo.package_targets(package)? {
        let (label, selection) = match kind {
            TargetKind::Bin => (name.clone(), vec!["--bin".to_owned(), name]),
            TargetKind::Test => (name.clone(), vec!["--test".to_owned(), name]),
            kind if is_library(&kind) => {
                if has_lib {
                    continue;
                }
                has_lib = true;
                ("lib".to_owned(), vec!["--lib".to_owned()])
            }
            _ => continue,
        };
        out.push(Target { label, selection });
    }
    if has_lib {
        out.push(Target {
            label: "doc".to_owned(),
            selection: vec!["--doc".to_owned()],
        });
    }
    Ok(out)
}

/// Builds and runs the own tests of `packages` in the tree of `cargo`.
///
/// # Errors
/// When cargo cannot be started or its metadata read.
pub fn run(cargo: &Cargo, packages: &[String]) -> Result<UpstreamRun> {
    let mut out = UpstreamRun {
        packages: packages.to_vec(),
        ..UpstreamRun::default()
    };
    for package in packages {
        ui::step(&format!("upstream's own tests: {package}"));
        let package_arg = vec!["-p".to_owned(), package.clone()];
        for target in targets(cargo, package)? {
            let mut selection = package_arg.clone();
            selection.extend(target.selection.iter().cloned());
            let at = format!("{package}::{}", target.label);
            if target.label != "doc"
                && !cargo.test(&[selection.clone(), vec!["--no-run".into()]].concat(), &[])?
            {
                out.not_built.push(at);
                continue;
            }
            let (passed, output) = cargo.test_captured(&selection, &[])?;
            if passed {
                continue;
            }
            let failed = libtest::failed_tests(&output);
            if failed.is_empty() {
                out.broken
                    .push(format!("{at} (failed without naming a test)"));
                continue;
            }
            for name in failed {
                ui::step(&format!("running {at}::{name} again"));
                let (again, _) =
                    cargo.test_captured(&selection, &["--exact".to_owned(), name.clone()])?;
                if again {
                    out.flaky.push(format!("{at}::{name}"));
                } else {
                    out.broken.push(format!("{at}::{name}"));
                }
            }
        }
    }
    Ok(out)
}
