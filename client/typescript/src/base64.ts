/** Base64 with the `btoa`/`atob` that Node 20 and browsers share (no Buffer, so no Node types). */

/** Base64 of bytes. */
export function toBase64(bytes: Uint8Array): string {
  let binary = "";
  // in chunks: String.fromCharCode with a huge spread overflows the stack
  for (let start = 0; start < bytes.length; start += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(start, start + 0x8000));
  }
  return btoa(binary);
}

/** The bytes of a base64 string. */
export function fromBase64(text: string): Uint8Array {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}
