//! Classifying what an agent says when it cannot reopen a stored session.
