//! Smoke test of `verify` (the real binary, so the nested cargo output is
//! captured) with real cargo builds of a trivial crate: every prefix builds
//! and passes its guard, the defect test fails once fixed, and the mutation
//! check proves the guard depends on the patch by the assertion it fails
//! without it; a guard that only fails to compile without its patch is
//! rejected unless the registry names it an API guard.

mod common;

use buzz_fork::mutation::{MutationReport, Verdict};
use common::{Fixture, add_channels_patch, run_bin};

fn evidence(f: &Fixture) -> MutationReport {
    serde_json::from_str(&f.read("target/fork-work/mutation.json")).unwrap()
}

#[test]
fn verify_with_mutation_on_a_tiny_series() {
    let f = Fixture::new();
    f.add_resume_patch();
    let (code, out, err) = run_bin(&f.root, &["verify", "--mutation"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let out = common::redact(&out, &f.root);
    insta::assert_snapshot!(out, @r"
    id             | prefix build | guards   | defects           | mutation
    ---------------|--------------|----------|-------------------|-------------
    session-resume | ok           | 1 passed | fails as expected | ok: 1 killed

    whole test suite: passed
    mutation evidence: <root>/target/fork-work/mutation.json (<root>/target/fork-work/mutation.md)

    verify passed
    ");
    // The cargo commands stream to stderr, with the patched profile.
    assert!(err.contains("==> cargo build --manifest-path"), "{err}");
    assert!(err.contains("--profile patched"), "{err}");
    assert!(
        err.contains("-- --exact --skip second_ensure_opens_a_new_session"),
        "{err}"
    );
    // Patched artifacts land in target/patched/, never in target/debug/.
    assert!(f.root.join("target/patched").is_dir());
    assert!(!f.root.join("target/debug").exists());
    // The full patched tree is left in place.
    assert_eq!(
        std::fs::read_to_string(f.root.join("target/fork-work/tree/crates/up/src/pool.rs"))
            .unwrap(),
        common::POOL_RESUMED
    );
    // The evidence names the assertion the guard fails by without the patch.
    let report = evidence(&f);
    let guard = &report.patches[0].guards[0];
    assert_eq!(guard.test, "session_resume::resumes");
    match &guard.verdict {
        Verdict::Killed { failure } => {
            assert_eq!(failure.location, "tests/tests/session_resume.rs:8:5");
            assert!(
                failure
                    .message
                    .starts_with("assertion `left == right` failed"),
                "{failure:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    let md = f.read("target/fork-work/mutation.md");
    assert!(
        md.contains(
            "| `session_resume::resumes` | passed | failed | assertion at `tests/tests/session_resume.rs:8:5` |"
        ),
        "{md}"
    );

    // A guard that passes without the patch is reported by the mutation
    // check; a defect test that still passes is reported too.
    let mut reg = f.registry();
    reg.patches[0]
        .guard_tests
        .push("session_resume::unrelated".into());
    reg.patches[0]
        .fixes_defects
        .push("up-fork-tests::session_resume::unrelated".into());
    reg.save(&f.root).unwrap();
    let (code, out, err) = run_bin(&f.root, &["verify", "--mutation", "--skip-prefix"]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains("guard session_resume::unrelated still PASSES without the patch"),
        "{out}"
    );
    assert!(
        out.contains("defect test up-fork-tests::session_resume::unrelated still passes"),
        "{out}"
    );
    assert!(out.contains("2 problem(s):"), "{out}");
    assert!(out.contains("whole test suite: passed"), "{out}");
}

/// The mutation check rejects a guard that only fails to compile without
/// its patch (`pool_channels::counts_channels` calls the method the patch
/// adds), and accepts it, reported as an API guard and never as a kill,
/// once the registry says why.
#[test]
fn a_guard_that_only_fails_to_compile_without_its_patch_is_rejected() {
    let f = Fixture::new();
    f.add_resume_patch();
    add_channels_patch(&f, None);
    let report_copy = f.root.join("docs/mutation-report.md");
    let (code, out, err) = run_bin(
        &f.root,
        &[
            "verify",
            "--mutation",
            "--skip-prefix",
            "--mutation-report",
            report_copy.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains(
            "[pool-channels] guard pool_channels::counts_channels does not compile without its patch: \
             it proves the patch's API, not its behaviour"
        ),
        "{out}"
    );
    assert!(
        out.contains("pool-channels  | skipped      | skipped | none              | FAIL: 1 does not compile without its patch"),
        "{out}"
    );
    assert!(out.contains("1 problem(s):"), "{out}");
    let report = evidence(&f);
    assert_eq!(
        report.patches[1].guards[0].verdict,
        Verdict::DoesNotCompileWithout
    );
    // The committed copy is the Markdown rendering.
    assert_eq!(
        std::fs::read_to_string(&report_copy).unwrap(),
        f.read("target/fork-work/mutation.md")
    );

    let text = f.read("patches.json").replace(
        "\"fixes_defects\": [],\n      \"retired\": null\n    }\n  ]",
        "\"api_guards\": [{\"test\": \"pool_channels::counts_channels\", \"reason\": \"Pool::channels is new API\"}],\n      \"fixes_defects\": [],\n      \"retired\": null\n    }\n  ]",
    );
    common::write(&f.root.join("patches.json"), &text);
    let (code, out, err) = run_bin(&f.root, &["verify", "--mutation", "--skip-prefix"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("| ok: 1 API guard"), "{out}");
    assert_eq!(
        evidence(&f).patches[1].guards[0].verdict,
        Verdict::ApiGuard {
            reason: "Pool::channels is new API".into()
        }
    );
    assert!(
        f.read("target/fork-work/mutation.md")
            .contains("| `pool_channels::counts_channels` | passed | failed to compile | API guard: Pool::channels is new API |")
    );
}
