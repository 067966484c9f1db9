// mcpvisor dashboard: how a memory figure is written, as ps and inspect
// write it (proc.FormatMemory in Go, tested against this): in the largest
// of B, KiB, MiB, GiB, TiB that is at most n, with one decimal below 100
// units and none from 100 (or in bytes), rounded half up on the exact
// value; a figure that rounds to 1024 of a unit is written as 1.0 of the
// next. Integer arithmetic: exact for any n below 2^53 / 20.
"use strict";
function formatBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0, d = 1;
  while (i < units.length - 1 && n >= d * 1024) { i++; d *= 1024; }
  if (i === 0) return n + " B";
  let tenths = Math.floor((n * 20 + d) / (2 * d));
  if (tenths >= 1000) {
    const whole = Math.floor((n * 2 + d) / (2 * d));
    if (whole < 1024 || i === units.length - 1) return whole + " " + units[i];
    i++; d *= 1024; // rounded up to 1024 of a unit: one of the next
    tenths = Math.floor((n * 20 + d) / (2 * d));
  }
  return Math.floor(tenths / 10) + "." + (tenths % 10) + " " + units[i];
}
