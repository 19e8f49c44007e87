/**
 * Leader election's options and answers (the campaign itself is election.ts's): what
 * {@link Client.campaign} takes, a candidate's standing as the server answers it (snake_case),
 * and what {@link Client.leader}, {@link Client.checkTerm} and {@link Client.observe} answer.
 */

/** What {@link Client.campaign} takes. */
export interface CampaignOptions {
  /** What the candidate publishes while it leads (its address, ...): text of at most 4096 bytes. */
  value: string;
  /** The term's TTL in ms, renewed at a third of it (the server's default when absent). */
  ttlMs?: number | undefined;
  /**
   * How long to wait in line, in ms: then a `LockHeldError`, and the line is left. Default:
   * without limit (until it leads, or `signal` aborts).
   */
  waitMs?: number | undefined;
  /** A label for people. */
  holder?: string | undefined;
  /** Should the term end other than by a resignation, nobody leads for this long, in ms. */
  lockDelayMs?: number | undefined;
  /** Gives up the campaign when aborted (the line is left, a term got meanwhile resigned). */
  signal?: AbortSignal | undefined;
  /** Watch the term's event stream for its loss (default true); else the heartbeats tell it. */
  watch?: boolean | undefined;
  /**
   * While the candidate waits in line: called with an {@link InLine} for each answer in line
   * (the campaign's own, then one per poll: at least every --max-wait-ms), never after it
   * leads; keep it quick. Should it throw, the line is left and the campaign rejects with
   * what it threw.
   */
  onInLine?: ((inLine: InLine) => void) | undefined;
}

/**
 * Where a campaign's candidate stands, as an answer in line tells it ({@link CampaignOptions.onInLine}):
 * `position` (1: next), `leader` (who leads now: its `holder`, `value`, `term`, ...; absent when
 * nobody leads) and `estimatedWaitMs` (the server's estimate of the wait until it leads, from
 * the election's recent terms; absent until three terms have ended).
 */
export interface InLine {
  position: number;
  leader?: ElectionLeader;
  estimatedWaitMs?: number;
}

/** A candidate's standing, as the server answers it: a term once it leads, a position while in line. */
export interface CandidateBody {
  candidate_id: string;
  /** Only in the answer that made the candidate. */
  token?: string | null;
  election: string;
  term?: number;
  value?: string;
  ttl_ms?: number;
  expires_at?: string;
  position?: number;
  keep_by?: string;
  leader?: ElectionLeader | null;
  /** In line: the server's estimate of the wait until it leads, in ms (absent: too few ended terms). */
  estimated_wait_ms?: number | null;
  wait_ms?: number | null;
}

/** An election's leader, as anyone may see it. */
export interface ElectionLeader {
  candidate_id: string | null;
  term: number;
  value: string | null;
  holder: string | null;
  since: string | null;
  expires_at: string | null;
}

/** `GET /v1/elections/{name}` ({@link Client.leader}). */
export interface ElectionInfo {
  election: string;
  /** `null` when nobody leads. */
  leader: ElectionLeader | null;
  /** The last term handed out; 0 before the first. */
  term: number;
  /** The first candidates in line, in order. */
  candidates: { position: number; candidate_id: string | null; holder: string | null; since: string | null }[];
  candidates_waiting: number;
}

/** {@link Client.checkTerm}'s answer. */
export interface TermCheck {
  election: string;
  term: number;
  /** The term is the leader's now (stale as soon as it is answered). */
  current: boolean;
  last_term: number;
}

/** One change {@link Client.observe} tells. */
export interface ElectionEvent {
  /** `leader` (a new term, or a new value in a term), `vacant` (nobody leads), `resync` (terms may be missing). */
  kind: "leader" | "vacant" | "resync";
  /** The term (a `vacant` event's: the last one). */
  term: number;
  value?: string;
  holder?: string;
  since?: string;
  candidateId?: string;
  /** Its place in the election's terms log (what a reconnection resumes from). */
  id?: string;
}
