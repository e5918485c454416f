/**
 * A WebSocket's auth frames: the credentials in its first frame, then a provider's fresh token
 * shortly before the current one expires, so the socket outlives its token (no 4401 close).
 */

import { fromBase64 } from "./base64.js";
import { Transport } from "./http.js";
import { FrameSink } from "./message.js";

/** A token is replaced this long before its `exp`, or a tenth of its life when that is shorter. */
const REFRESH_MARGIN_MS = 30_000;
const REFRESH_MARGIN_SHARE = 0.1;
/** `setTimeout`'s longest delay: a later refresh time is reached in steps. */
const MAX_TIMER_MS = 2 ** 31 - 1;
const OPEN = 1;

/** One socket's refresh timer. At the held token's refresh time it asks the provider for a fresh
 * token (forgetting the held one first), sends it as `{"type": "auth", "token": ...}` and, once
 * the gateway answers `authenticated`, arms itself for the new token. Whatever fails (the
 * provider, or it gives the same token) stops it, and the gateway's 4401 at the old token's expiry
 * takes the reconnect path; a fresh token the gateway refuses closes the socket (4401, 4403).
 * Does nothing without a provider or for a token without an `exp`; `cancel` when the socket
 * closes. */
export class SocketTokenRefresh {
  /** The token the socket holds: its first frame's, then each one the gateway took. */
  token: string | undefined;
  /** Fresh tokens the gateway took on this socket. */
  refreshes = 0;
  private readonly transport: Transport;
  private readonly socket: FrameSink;
  /** The token of the auth frame awaiting its `authenticated`. */
  private offered: string | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private stopped = false;

  constructor(transport: Transport, socket: FrameSink, token: string | undefined) {
    this.transport = transport;
    this.socket = socket;
    this.token = token;
  }

  /** The socket opened: send the credentials in a first frame (browsers cannot set headers on a
   * WebSocket upgrade), and arm for the token. */
  start(): void {
    const { apiKey } = this.transport.credentials;
    if (this.token) this.socket.send(JSON.stringify({ type: "auth", token: this.token }));
    else if (apiKey) this.socket.send(JSON.stringify({ type: "auth", api_key: apiKey }));
    if (this.transport.refreshable) this.arm();
  }

  /** The gateway's `authenticated` frame: the offered token is the socket's now. */
  authenticated(): void {
    if (this.offered === undefined || this.stopped) return;
    this.token = this.offered;
    this.offered = undefined;
    this.refreshes++;
    this.arm();
  }

  /** The gateway refused the socket's token (4401): the next connect asks the provider again. */
  forgetTokens(): void {
    this.transport.forgetToken(this.token);
    if (this.offered !== undefined) this.transport.forgetToken(this.offered);
  }

  /** The socket closed: no timer left behind. Idempotent. */
  cancel(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private arm(): void {
    const dueMs = this.token === undefined ? Infinity : refreshDueMs(this.token, Date.now());
    if (this.stopped || !Number.isFinite(dueMs)) return;
    const delayMs = Math.max(0, dueMs - Date.now());
    const stepMs = Math.min(delayMs, MAX_TIMER_MS);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (stepMs < delayMs) this.arm();
      else void this.offerFresh();
    }, stepMs);
  }

  private async offerFresh(): Promise<void> {
    const held = this.token;
    // the provider is asked unless another socket or a request already got a newer token
    this.transport.forgetToken(held);
    let fresh: string | undefined;
    try {
      fresh = await this.transport.currentToken();
    } catch {
      return;
    }
    if (this.stopped || !fresh || fresh === held || this.socket.readyState !== OPEN) return;
    this.offered = fresh;
    this.socket.send(JSON.stringify({ type: "auth", token: fresh }));
  }
}

/** When a JWT should be replaced (epoch ms): its `exp` less the margin, Infinity for a token that
 * is not a JWT with an `exp` (used until the gateway refuses it). The payload is read, not
 * verified: only the gateway can tell whether the token is good. */
export function refreshDueMs(token: string, nowMs: number): number {
  const claims = jwtClaims(token);
  const exp = claims["exp"];
  if (typeof exp !== "number" || !Number.isFinite(exp)) return Infinity;
  const iat = claims["iat"];
  const issuedS = typeof iat === "number" && Number.isFinite(iat) ? iat : nowMs / 1000;
  const lifeMs = Math.max(0, exp - Math.min(issuedS, exp)) * 1000;
  return exp * 1000 - Math.min(REFRESH_MARGIN_MS, REFRESH_MARGIN_SHARE * lifeMs);
}

/** A JWT's payload (base64url JSON); empty for anything else. */
function jwtClaims(token: string): Record<string, unknown> {
  const parts = token.split(".");
  const payload = parts[1];
  if (parts.length !== 3 || payload === undefined) return {};
  const base64 = payload.replace(/-/g, "+").replace(/_/g, "/");
  try {
    const text = new TextDecoder().decode(fromBase64(base64.padEnd(
      base64.length + (4 - base64.length % 4) % 4, "=")));
    const claims: unknown = JSON.parse(text);
    return claims !== null && typeof claims === "object" && !Array.isArray(claims)
      ? claims as Record<string, unknown> : {};
  } catch {
    return {};
  }
}
