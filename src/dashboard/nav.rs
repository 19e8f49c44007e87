//! The header every page shows: who is signed in, what they may do, whether Redis has a
//! master.

/// What the header needs: who is signed in (then the CSRF token of their forms), whether they
/// may force-release, and whether signing in is possible at all.
#[derive(Debug, Clone, Default)]
pub struct Nav {
    /// Signed in: the CSRF token of this session's forms (sign-out).
    pub csrf: Option<String>,
    /// Signed in with the admin role: the CSRF token of the force-release form.
    pub force_csrf: Option<String>,
    /// Whom the header shows as signed in (`admin`, or the key's name).
    pub who: String,
    /// The server has an admin token or API keys to sign in with.
    pub admin_enabled: bool,
    /// No Redis master is known (a Sentinel failover in progress): every page says so.
    pub redis_failing_over: bool,
}
