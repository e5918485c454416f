// Waiting with a deadline, shared by the Node tests and the browser page of the Chromium test
// (no Node imports here): a hung test must fail, not stall CI.

/** `promise`, or a rejection naming `what` after `ms`. */
export async function within(ms, what, promise) {
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}
