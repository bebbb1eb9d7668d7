//! Guard of the resume-stored-session patch.

#[test]
fn a_restart_resumes_the_stored_session() {
    assert_eq!(buzz_acp::session_after_restart(Some(7)), 7);
}
