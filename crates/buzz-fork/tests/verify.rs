//! Smoke test of `verify` (the real binary, so the nested cargo output is
//! captured) with real cargo builds of a trivial crate: every prefix builds
//! and passes its guard, the defect test fails once fixed, and the mutation
//! check proves the guard depends on the patch.

mod common;

use common::{Fixture, run_bin};

#[test]
fn verify_with_mutation_on_a_tiny_series() {
    let f = Fixture::new();
    f.add_resume_patch();
    let (code, out, err) = run_bin(&f.root, &["verify", "--mutation"]);
    assert_eq!(code, 0, "{out}\n{err}");
    insta::assert_snapshot!(out, @r"
    id             | prefix build | guards   | defects           | mutation
    ---------------|--------------|----------|-------------------|-------------
    session-resume | ok           | 1 passed | fails as expected | ok: 1 failed

    whole test suite: passed

    verify passed
    ");
    // The cargo commands stream to stderr, with the patched profile.
    assert!(err.contains("==> cargo check --manifest-path"), "{err}");
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
