//! Guard of the resume-within-limit patch.

#[test]
fn resumes_up_to_the_limit() {
    let limit = buzz_core::session_limit();
    assert!(buzz_acp::may_resume(limit));
    assert!(!buzz_acp::may_resume(limit + 1));
}
