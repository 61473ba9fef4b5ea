use super::*;

fn retry(max_attempts: u32) -> RetryConfig {
    RetryConfig {
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_millis(300),
        max_attempts,
    }
}

fn started(required: &[bool], max_attempts: u32) -> Machine {
    let mut m = Machine::new(required, retry(max_attempts));
    assert_eq!(m.handle(Input::Start), vec![Action::Preflight]);
    m
}

#[test]
fn happy_path_to_ready_and_drained() {
    let mut m = started(&[true, false], 0);
    let acts = m.handle(Input::PreflightFinished(Ok(())));
    assert_eq!(
        acts,
        vec![
            Action::Register { group: 0, attempt: 1 },
            Action::Register { group: 1, attempt: 1 }
        ]
    );
    assert!(!m.ready());
    m.handle(Input::AttemptFinished {
        group: 0,
        result: Ok(()),
    });
    assert!(m.ready(), "optional group 1 does not gate readiness");
    m.handle(Input::AttemptFinished {
        group: 1,
        result: Ok(()),
    });
    assert_eq!(m.handle(Input::ShutdownRequested), vec![Action::Drain]);
    assert!(!m.ready(), "not ready the moment shutdown is requested");
    assert_eq!(m.handle(Input::DrainFinished), vec![Action::Stop]);
    assert_eq!(m.phase(), Phase::Stopped);
    assert_eq!(m.group_state(0), GroupState::Deregistered);
}

#[test]
fn failures_back_off_with_a_cap_and_recover() {
    let mut m = started(&[true], 0);
    m.handle(Input::PreflightFinished(Ok(())));
    let mut delays = vec![];
    for attempt in 1..=4 {
        let acts = m.handle(Input::AttemptFinished {
            group: 0,
            result: Err(Reason::NixlBackendError),
        });
        match acts.as_slice() {
            [Action::ScheduleRetry { group: 0, after }] => delays.push(after.as_millis()),
            other => panic!("{other:?}"),
        }
        assert_eq!(m.group_state(0), GroupState::Failed);
        assert_eq!(
            m.handle(Input::RetryDue { group: 0 }),
            vec![Action::Register {
                group: 0,
                attempt: attempt + 1
            }]
        );
    }
    assert_eq!(delays, [100, 200, 300, 300]);
    m.handle(Input::AttemptFinished {
        group: 0,
        result: Ok(()),
    });
    assert!(m.ready());
    assert_eq!(m.attempts(0), 5);
    assert_eq!(m.consecutive_failures(0), 0);
    assert_eq!(m.last_reason(0), Some(Reason::NixlBackendError));
}

#[test]
fn max_attempts_gives_up() {
    let mut m = started(&[true], 2);
    m.handle(Input::PreflightFinished(Ok(())));
    m.handle(Input::AttemptFinished {
        group: 0,
        result: Err(Reason::InvalidAddress),
    });
    m.handle(Input::RetryDue { group: 0 });
    assert_eq!(
        m.handle(Input::AttemptFinished {
            group: 0,
            result: Err(Reason::InvalidAddress)
        }),
        vec![]
    );
    assert_eq!(m.group_state(0), GroupState::GaveUp);
    assert_eq!(m.handle(Input::RetryDue { group: 0 }), vec![]);
}

#[test]
fn unavailable_nixl_never_registers_but_drains() {
    let mut m = started(&[true], 0);
    assert_eq!(m.handle(Input::PreflightFinished(Err(Reason::NixlUnavailable))), vec![]);
    assert_eq!(m.phase(), Phase::Unavailable);
    assert!(!m.ready());
    assert_eq!(m.handle(Input::RetryDue { group: 0 }), vec![]);
    assert_eq!(m.handle(Input::ShutdownRequested), vec![Action::Drain]);
}

#[test]
fn stale_and_repeated_inputs_are_ignored() {
    let mut m = started(&[true], 0);
    m.handle(Input::PreflightFinished(Ok(())));
    // A retry timer for a group that is not failed does nothing.
    assert_eq!(m.handle(Input::RetryDue { group: 0 }), vec![]);
    m.handle(Input::ShutdownRequested);
    // Second signal, late timers and late results during drain: nothing.
    assert_eq!(m.handle(Input::ShutdownRequested), vec![]);
    assert_eq!(m.handle(Input::RetryDue { group: 0 }), vec![]);
    assert_eq!(
        m.handle(Input::AttemptFinished {
            group: 0,
            result: Ok(())
        }),
        vec![]
    );
    assert_eq!(m.handle(Input::Start), vec![]);
    assert!(!m.ready());
}

#[test]
fn no_groups_is_ready_once_nixl_is_up() {
    let mut m = started(&[], 0);
    assert!(!m.ready());
    m.handle(Input::PreflightFinished(Ok(())));
    assert!(m.ready());
}

#[test]
fn reregister_deregisters_then_attempts_again() {
    let mut m = started(&[true], 0);
    m.handle(Input::PreflightFinished(Ok(())));
    // Not registered yet: nothing to do.
    assert_eq!(m.handle(Input::ReregisterRequested { group: 0 }), vec![]);
    m.handle(Input::AttemptFinished {
        group: 0,
        result: Ok(()),
    });
    assert!(m.ready());
    let acts = m.handle(Input::ReregisterRequested { group: 0 });
    assert_eq!(
        acts,
        vec![
            Action::Deregister { group: 0 },
            Action::Register { group: 0, attempt: 2 }
        ]
    );
    assert!(!m.ready(), "not ready while the group is re-registering");
    m.handle(Input::AttemptFinished {
        group: 0,
        result: Ok(()),
    });
    assert!(m.ready());
    // A failed group is retried at once, with its backoff reset.
    m.handle(Input::ReregisterRequested { group: 0 });
    m.handle(Input::AttemptFinished {
        group: 0,
        result: Err(Reason::Unknown),
    });
    assert_eq!(m.consecutive_failures(0), 1);
    assert_eq!(
        m.handle(Input::ReregisterRequested { group: 0 }),
        vec![Action::Register { group: 0, attempt: 4 }]
    );
    assert_eq!(m.consecutive_failures(0), 0);
    m.handle(Input::ShutdownRequested);
    assert_eq!(
        m.handle(Input::ReregisterRequested { group: 0 }),
        vec![],
        "ignored while draining"
    );
}

#[test]
fn max_attempts_counts_an_episode_not_a_lifetime() {
    let mut m = started(&[true], 2);
    m.handle(Input::PreflightFinished(Ok(())));
    m.handle(Input::AttemptFinished {
        group: 0,
        result: Ok(()),
    });
    // Many re-registrations, each successful: attempts grow past the budget.
    for _ in 0..5 {
        let attempt = m.attempts(0) + 1;
        assert_eq!(
            m.handle(Input::ReregisterRequested { group: 0 }),
            vec![Action::Deregister { group: 0 }, Action::Register { group: 0, attempt }]
        );
        m.handle(Input::AttemptFinished {
            group: 0,
            result: Ok(()),
        });
    }
    assert!(m.attempts(0) > 2);
    // One transient failure is retried, not given up on.
    m.handle(Input::ReregisterRequested { group: 0 });
    let acts = m.handle(Input::AttemptFinished {
        group: 0,
        result: Err(Reason::NixlBackendError),
    });
    assert!(matches!(acts[..], [Action::ScheduleRetry { group: 0, .. }]), "{acts:?}");
    assert_eq!(m.group_state(0), GroupState::Failed);
}
