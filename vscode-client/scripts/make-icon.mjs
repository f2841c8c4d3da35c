// Draws images/icon.png (128x128): four ranks on a ring, joined like an all-reduce, on an
// orange tile. A few lines of geometry and a hand-written PNG encoder (zlib from node), so the
// icon is reproducible without downloads or image tools: `node scripts/make-icon.mjs`.
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { deflateSync } from "node:zlib";

const SIZE = 128;
const SS = 4; // supersampling per axis, for smooth edges

const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k += 1) {
    c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  }
  return c >>> 0;
});

function crc32(buf) {
  let c = 0xffffffff;
  for (const b of buf) {
    c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  }
  return (c ^ 0xffffffff) >>> 0;
}

function chunk(type, data) {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, "ascii"), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(body));
  return Buffer.concat([len, body, crc]);
}

const center = SIZE / 2;
const ranks = [0, 1, 2, 3].map((i) => {
  const a = -Math.PI / 2 + (i * Math.PI) / 2;
  return [center + 34 * Math.cos(a), center + 34 * Math.sin(a)];
});

function distToSegment(px, py, [ax, ay], [bx, by]) {
  const dx = bx - ax;
  const dy = by - ay;
  const t = Math.max(0, Math.min(1, ((px - ax) * dx + (py - ay) * dy) / (dx * dx + dy * dy)));
  return Math.hypot(px - (ax + t * dx), py - (ay + t * dy));
}

// Colour of one sample point: [r, g, b, a].
function sample(x, y) {
  const r = 22; // tile corner radius
  const qx = Math.max(r - x, 0, x - (SIZE - r));
  const qy = Math.max(r - y, 0, y - (SIZE - r));
  if (Math.hypot(qx, qy) > r) {
    return [0, 0, 0, 0];
  }
  for (const [cx, cy] of ranks) {
    const d = Math.hypot(x - cx, y - cy);
    if (d < 13) {
      return d < 7 ? [238, 76, 44, 255] : [255, 255, 255, 255];
    }
  }
  for (let i = 0; i < 4; i += 1) {
    for (let j = i + 1; j < 4; j += 1) {
      if (distToSegment(x, y, ranks[i], ranks[j]) < 3.2) {
        return [255, 236, 224, 255];
      }
    }
  }
  return [238, 76, 44, 255];
}

const rows = [];
for (let y = 0; y < SIZE; y += 1) {
  const row = Buffer.alloc(1 + SIZE * 4); // filter byte 0, then RGBA
  for (let x = 0; x < SIZE; x += 1) {
    const acc = [0, 0, 0, 0];
    for (let sy = 0; sy < SS; sy += 1) {
      for (let sx = 0; sx < SS; sx += 1) {
        const c = sample(x + (sx + 0.5) / SS, y + (sy + 0.5) / SS);
        // Premultiply so that edge samples blend towards transparent, not towards black.
        acc[0] += c[0] * c[3];
        acc[1] += c[1] * c[3];
        acc[2] += c[2] * c[3];
        acc[3] += c[3];
      }
    }
    const a = acc[3];
    const px = a ? [acc[0] / a, acc[1] / a, acc[2] / a, a / (SS * SS)] : [0, 0, 0, 0];
    px.forEach((v, k) => (row[1 + x * 4 + k] = Math.round(v)));
  }
  rows.push(row);
}

const header = Buffer.alloc(13);
header.writeUInt32BE(SIZE, 0);
header.writeUInt32BE(SIZE, 4);
header[8] = 8; // bit depth
header[9] = 6; // RGBA
const png = Buffer.concat([
  Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
  chunk("IHDR", header),
  chunk("IDAT", deflateSync(Buffer.concat(rows), { level: 9 })),
  chunk("IEND", Buffer.alloc(0)),
]);
const out = join(dirname(fileURLToPath(import.meta.url)), "..", "images", "icon.png");
writeFileSync(out, png);
console.log(`wrote ${out} (${png.length} bytes)`);
