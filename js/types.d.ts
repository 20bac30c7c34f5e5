// Ambient declarations for `tsc --checkJs` (see tsconfig.json): the module build.mjs generates,
// and Node's Buffer, which layout_client.js uses only where it exists (node tests).
declare module "gvw:layout-worker-source" {
  const workerSourceGzipB64: string;
  export default workerSourceGzipB64;
}
declare const Buffer: { from(text: string, encoding: string): { toString(encoding: string): string } };
