-- omx.lua: Wireshark/tshark dissector for the omx (Open-MX) wire, EtherType 0x86DF.
--
-- Both layouts (native at any frame size, MX-wire-compatible), the latency and checksum
-- flags of the type byte, the checksum trailer (CRC32C, verified), bundles and their
-- inner frames, one-sided flags, discovery and raw frames. Fields are filterable as
-- omx.<name>: omx.type == "pull_reply", omx.seqnum, omx.match_info, omx.src_endpoint...
-- Expert info marks retransmissions, nacks, out-of-window sequence numbers, bad
-- checksums and malformed frames.
--
-- Use: tshark -X lua_script:omx.lua -r capture.pcap, or install it in a plugin
-- directory (make install: PREFIX/lib/wireshark/plugins; docs/TOOLS.md).
-- Preference omx.layout: auto (default), native or mx.

local omx = Proto("omx", "omx (Open-MX) message passing")

-- BEGIN LAYOUT
-- The frame layout, as omx-wire (crates/omx-wire) encodes it; checked against it by
-- crates/omx-tools/tests/dissector_layout.rs, so edit both together. Offsets count
-- from the type byte (frame offset 16); { name, offset, size } per field.
local ETHERTYPE = 0x86DF
local ETH_HEADER_LEN = 14
local COMMON_HEADER_LEN = 16
local LATENCY_FLAG = 0x80
local CHECKSUM_FLAG = 0x40
local CHECKSUM_LEN = 4
local PULL_MAGIC_XOR = 0x21071980
local BUNDLE_TYPE = 46
local BUNDLE_HEADER_LEN = 20
-- Striping (OMX_STRIPE): PULL and PULL_REPLY on a host's other boards, same bodies.
local STRIPE_PULL_TYPE = 47
local STRIPE_PULL_REPLY_TYPE = 48
local STRIPED = { [STRIPE_PULL_TYPE] = "pull", [STRIPE_PULL_REPLY_TYPE] = "pull_reply" }
local TYPES = {
  [1] = "raw", [2] = "mfm_nic_reply", [3] = "host_query", [4] = "host_reply",
  [32] = "ether_unicast", [33] = "ether_multicast", [34] = "ether_native",
  [35] = "truc", [36] = "connect", [37] = "tiny", [38] = "small", [39] = "medium",
  [40] = "rndv", [41] = "pull", [42] = "pull_reply", [43] = "notify",
  [44] = "nack_lib", [45] = "nack_mcp",
}
local MSG = {
  { "dst_endpoint", 1, 1 }, { "src_endpoint", 2, 1 }, { "flags", 3, 1 },
  { "length", 4, 2 }, { "checksum", 6, 2 }, { "lib_seqnum", 8, 2 },
  { "lib_piggyack", 10, 2 }, { "match_info", 12, 8 }, { "session", 20, 4 },
}
local LAYOUT = {
  host_query = { body = 16, { "src_dst_peer_index", 2, 2 }, { "magic", 8, 4 } },
  host_reply = { body = 16, payload = "length",
    { "length", 1, 1 }, { "src_dst_peer_index", 2, 2 }, { "magic", 8, 4 } },
  tiny = { body = 24, payload = "length", table.unpack(MSG) },
  small = { body = 24, payload = "length", table.unpack(MSG) },
  rndv = { body = 32, { "msg_length", 24, 4 }, { "pulled_rdma_id", 28, 1 },
    { "pulled_rdma_seqnum", 29, 1 }, { "pulled_rdma_offset", 30, 2 }, table.unpack(MSG) },
  notify = { body = 24,
    { "dst_endpoint", 1, 1 }, { "src_endpoint", 2, 1 }, { "flags", 3, 1 },
    { "session", 4, 4 }, { "total_length", 8, 4 }, { "pulled_rdma_id", 12, 1 },
    { "pulled_rdma_seqnum", 13, 1 }, { "lib_seqnum", 18, 2 }, { "lib_piggyack", 20, 2 } },
  pull_reply = { body = 16, payload = "frame_length",
    { "frame_seqnum", 1, 1 }, { "frame_length", 2, 2 }, { "msg_offset", 4, 4 },
    { "dst_pull_handle", 8, 4 }, { "dst_magic", 12, 4 } },
  connect = { body = 32,
    { "dst_endpoint", 1, 1 }, { "src_endpoint", 2, 1 }, { "length", 4, 1 },
    { "lib_seqnum", 8, 2 }, { "src_dst_peer_index", 10, 2 }, { "src_session_id", 16, 4 },
    { "app_key_or_target_session", 20, 4 }, { "target_recv_seqnum_start", 24, 2 },
    { "is_reply", 26, 1 }, { "connect_seqnum", 27, 1 }, { "status_code", 28, 1 },
    { "mtu_marker", 29, 1 }, { "link_mtu", 30, 2 },
    { "ext_marker", 12, 1 }, { "extensions", 13, 1 } },
  truc = { body = 28,
    { "dst_endpoint", 1, 1 }, { "src_endpoint", 2, 1 }, { "length", 4, 1 },
    { "session", 8, 4 }, { "truc_type", 12, 1 }, { "lib_seqnum", 14, 2 },
    { "session_id", 16, 4 }, { "acknum", 20, 4 }, { "send_seq", 24, 2 },
    { "resent", 26, 1 } },
  nack_lib = { body = 16,
    { "src_endpoint", 1, 1 }, { "nack_type", 3, 1 }, { "dst_endpoint", 9, 1 },
    { "dst_src_peer_index", 10, 2 }, { "lib_seqnum", 12, 2 } },
  nack_mcp = { body = 16,
    { "src_endpoint", 1, 1 }, { "nack_type", 3, 1 }, { "src_pull_handle", 8, 4 },
    { "src_magic", 12, 4 } },
}
-- The two layouts differ in MEDIUM and PULL only.
local NATIVE = {
  medium = { body = 32, payload = "frag_length",
    { "dst_endpoint", 1, 1 }, { "src_endpoint", 2, 1 }, { "length", 4, 4 },
    { "lib_seqnum", 8, 2 }, { "lib_piggyack", 10, 2 }, { "match_info", 12, 8 },
    { "session", 20, 4 }, { "frag_length", 24, 2 }, { "frag_seqnum", 26, 1 },
    { "checksum", 28, 2 } },
  pull = { body = 44,
    { "dst_endpoint", 1, 1 }, { "src_endpoint", 2, 1 }, { "session", 4, 4 },
    { "total_length", 8, 4 }, { "pulled_rdma_id", 12, 4 }, { "pulled_rdma_seqnum", 16, 1 },
    { "pulled_rdma_offset", 20, 4 }, { "src_pull_handle", 24, 4 }, { "src_magic", 28, 4 },
    { "first_frame_offset", 32, 4 }, { "block_length", 36, 4 }, { "frame_index", 40, 4 } },
}
local MX = {
  medium = { body = 32, payload = "frag_length",
    { "dst_endpoint", 1, 1 }, { "src_endpoint", 2, 1 }, { "length", 4, 2 },
    { "lib_seqnum", 8, 2 }, { "lib_piggyack", 10, 2 }, { "match_info", 12, 8 },
    { "session", 20, 4 }, { "frag_length", 24, 2 }, { "frag_seqnum", 26, 1 },
    { "frag_pipeline", 27, 1 }, { "checksum", 28, 2 } },
  pull = { body = 32,
    { "dst_endpoint", 1, 1 }, { "src_endpoint", 2, 1 }, { "session", 4, 4 },
    { "total_length", 8, 4 }, { "pulled_rdma_id", 12, 1 }, { "pulled_rdma_seqnum", 13, 1 },
    { "pulled_rdma_offset", 14, 2 }, { "src_pull_handle", 16, 4 }, { "src_magic", 20, 4 },
    { "first_frame_offset", 24, 2 }, { "block_length", 26, 2 }, { "frame_index", 28, 4 } },
}
-- END LAYOUT

-- Types that carry a sequence number of the sender's stream.
local SEQUENCED = { tiny = true, small = true, medium = true, rndv = true, notify = true }
-- A receiver keeps packets at most this far ahead of the next expected one.
local EARLY_WINDOW = 255
local SEQ_MASK = 0x3FFF
local NACK_TYPES = { [1] = "bad_endpoint", [2] = "endpoint_closed", [3] = "bad_session",
  [4] = "bad_rdma_win" }
local ONESIDED = { { 0x01, "get_req" }, { 0x02, "get_reply" }, { 0x04, "get_denied" },
  { 0x08, "put_req" }, { 0x10, "denied" } }

-- Filter names: the layout's, except the sequence numbers' shorter ones.
local FILTER = { lib_seqnum = "seqnum", lib_piggyack = "ack" }

local pf = {
  type = ProtoField.string("omx.type", "Type"),
  type_byte = ProtoField.uint8("omx.type_byte", "Type byte", base.HEX),
  latency = ProtoField.bool("omx.flags.latency", "Latency flag"),
  checksummed = ProtoField.bool("omx.flags.checksum", "Checksum flag"),
  peer_index = ProtoField.uint16("omx.peer_index", "Peer index (dst_src_peer_index)"),
  layout = ProtoField.string("omx.layout", "Layout"),
  trailer = ProtoField.uint32("omx.checksum_trailer", "Checksum trailer (CRC32C)", base.HEX),
  checksum_status = ProtoField.string("omx.checksum_status", "Checksum status"),
  payload = ProtoField.bytes("omx.payload", "Payload"),
  payload_len = ProtoField.uint32("omx.payload_length", "Payload length"),
  hostname = ProtoField.string("omx.hostname", "Host name"),
  raw_len = ProtoField.uint32("omx.raw_length", "Raw frame length"),
  onesided = ProtoField.string("omx.onesided", "One-sided operation"),
  nack_reason = ProtoField.string("omx.nack_reason", "Nack reason"),
  pull_endpoint = ProtoField.uint8("omx.pull_endpoint", "Endpoint (from the pull magic)"),
  bundle_items = ProtoField.uint16("omx.bundle.items", "Bundle items"),
  bundle_item_len = ProtoField.uint16("omx.bundle.item_length", "Item length"),
  retransmission = ProtoField.bool("omx.retransmission", "Retransmission"),
}
-- One field per layout name, wide enough for its largest use.
local width = {}
local function note_widths(layouts)
  for _, l in pairs(layouts) do
    for _, f in ipairs(l) do
      width[f[1]] = math.max(width[f[1]] or 0, f[3])
    end
  end
end
note_widths(LAYOUT); note_widths(NATIVE); note_widths(MX)
local HEX = { match_info = true, session = true, src_session_id = true,
  app_key_or_target_session = true, magic = true, dst_magic = true, src_magic = true,
  session_id = true, src_pull_handle = true, dst_pull_handle = true, checksum = true,
  truc_type = true, flags = true, mtu_marker = true, ext_marker = true, extensions = true }
for name, w in pairs(width) do
  local filter = "omx." .. (FILTER[name] or name)
  local b = HEX[name] and base.HEX or base.DEC
  if w == 8 then
    pf[name] = ProtoField.uint64(filter, name, b)
  elseif w == 4 then
    pf[name] = ProtoField.uint32(filter, name, b)
  elseif w == 2 then
    pf[name] = ProtoField.uint16(filter, name, b)
  else
    pf[name] = ProtoField.uint8(filter, name, b)
  end
end
local fields = {}
for _, f in pairs(pf) do table.insert(fields, f) end
omx.fields = fields

local ef = {
  retransmission = ProtoExpert.new("omx.expert.retransmission", "Retransmission",
    expert.group.SEQUENCE, expert.severity.NOTE),
  out_of_window = ProtoExpert.new("omx.expert.out_of_window",
    "Sequence number out of the receive window", expert.group.SEQUENCE, expert.severity.WARN),
  nack = ProtoExpert.new("omx.expert.nack", "Nack", expert.group.RESPONSE_CODE,
    expert.severity.WARN),
  bad_checksum = ProtoExpert.new("omx.expert.bad_checksum", "Bad checksum",
    expert.group.CHECKSUM, expert.severity.ERROR),
  malformed = ProtoExpert.new("omx.expert.malformed", "Malformed omx frame",
    expert.group.MALFORMED, expert.severity.ERROR),
}
omx.experts = { ef.retransmission, ef.out_of_window, ef.nack, ef.bad_checksum, ef.malformed }

omx.prefs.layout = Pref.enum("Layout", 0, "Frame layout of MEDIUM and PULL",
  { { 0, "auto", 0 }, { 1, "native", 1 }, { 2, "mx", 2 } }, false)

-- CRC32C (Castagnoli, reflected polynomial 0x82F63B78), as omx-wire's trailer.
local CRC_TABLE = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do
    if bit32.band(c, 1) ~= 0 then
      c = bit32.bxor(bit32.rshift(c, 1), 0x82F63B78)
    else
      c = bit32.rshift(c, 1)
    end
  end
  CRC_TABLE[i] = c
end
local function crc32c(parts)
  local crc = 0xFFFFFFFF
  for _, bytes in ipairs(parts) do
    for i = 0, bytes:len() - 1 do
      crc = bit32.bxor(bit32.rshift(crc, 8),
        CRC_TABLE[bit32.band(bit32.bxor(crc, bytes:get_index(i)), 0xFF)])
    end
  end
  return bit32.bnot(crc)
end

-- Per-capture state, rebuilt on each first pass: the highest sequence number seen per
-- stream, the (stream, seqnum, fragment) keys seen, and each frame's verdicts.
local streams, seen, verdicts = {}, {}, {}
function omx.init()
  streams, seen, verdicts = {}, {}, {}
end

local function field(tvb, base_off, f)
  local r = tvb(base_off + f[2], f[3])
  if f[3] == 8 then return r, r:uint64() end
  return r, r:uint()
end

-- MEDIUM and PULL: MX-wire frames carry frag_pipeline 12 at body byte 27; a native
-- PULL's block_length (body 36..40) is never 0, and an MX PULL is shorter.
local function layout_of(tname, tvb, at, len, type_byte)
  if omx.prefs.layout == 1 then return NATIVE, "native" end
  if omx.prefs.layout == 2 then return MX, "mx" end
  if bit32.band(type_byte, LATENCY_FLAG + CHECKSUM_FLAG) ~= 0 then return NATIVE, "native" end
  if tname == "medium" and len >= 32 and tvb(at + 27, 1):uint() == 12 then return MX, "mx" end
  if tname == "pull" and (len < 44 or tvb(at + 36, 4):uint() == 0) then return MX, "mx" end
  return NATIVE, "native"
end

local dissect_frame

-- One omx frame: its Ethernet header `head` (14 bytes, which the checksum covers), and
-- the rest of it, `rest` bytes of `tvb` from `base` (the peer index on).
dissect_frame = function(tvb, pinfo, tree, base, rest, head, inner)
  local len = rest + ETH_HEADER_LEN
  local off = base - ETH_HEADER_LEN
  local t = tree:add(omx, tvb(base, rest), inner and "omx inner frame" or "omx")
  if len < COMMON_HEADER_LEN + 1 then
    t:add_proto_expert_info(ef.malformed, "frame too short for its header")
    return "malformed"
  end
  t:add(pf.peer_index, tvb(base, 2))
  local at = off + COMMON_HEADER_LEN
  local type_byte = tvb(at, 1):uint()
  -- Endpoint frames (TRUC to NACK_MCP), bundles and striped pulls may carry flags;
  -- board frames never.
  local bare = type_byte
  local masked = bit32.band(type_byte, 0x3F)
  if masked >= 35 and masked <= STRIPE_PULL_REPLY_TYPE then bare = masked end
  -- A striped pull is laid out as a pull (tname) and shown as stripe_pull (shown).
  local tname = (bare == BUNDLE_TYPE and "bundle") or TYPES[bare] or STRIPED[bare]
  t:add(pf.type_byte, tvb(at, 1))
  if not tname then
    t:add(pf.type, tvb(at, 1), "unknown")
    t:add_proto_expert_info(ef.malformed, string.format("unknown packet type %d", type_byte))
    return "malformed"
  end
  local shown = STRIPED[bare] and ("stripe_" .. tname) or tname
  t:add(pf.type, tvb(at, 1), shown)
  local latency = bare ~= type_byte and bit32.band(type_byte, LATENCY_FLAG) ~= 0
  local checksummed = bare ~= type_byte and bit32.band(type_byte, CHECKSUM_FLAG) ~= 0
  t:add(pf.latency, tvb(at, 1), latency)
  t:add(pf.checksummed, tvb(at, 1), checksummed)
  if tname == "raw" then
    t:add(pf.raw_len, tvb(at, len - COMMON_HEADER_LEN), len - COMMON_HEADER_LEN)
    t:add(pf.payload, tvb(at, len - COMMON_HEADER_LEN))
    return tname
  end
  if tname == "bundle" then
    local count = tvb(at + 2, 2):uint()
    t:add(pf.dst_endpoint, tvb(at + 1, 1))
    t:add(pf.bundle_items, tvb(at + 2, 2))
    local pos, names = off + BUNDLE_HEADER_LEN, {}
    for _ = 1, count do
      if pos + 2 > off + len then
        t:add_proto_expert_info(ef.malformed, "bundle item past the end of the frame")
        return "bundle"
      end
      local ilen = tvb(pos, 2):uint()
      t:add(pf.bundle_item_len, tvb(pos, 2))
      if ilen <= COMMON_HEADER_LEN or pos + 2 + ilen > off + len then
        t:add_proto_expert_info(ef.malformed, "bundle item length out of range")
        return "bundle"
      end
      table.insert(names, dissect_frame(tvb, pinfo, t, pos + 2 + ETH_HEADER_LEN,
        ilen - ETH_HEADER_LEN, tvb(pos + 2, ETH_HEADER_LEN):bytes(), true))
      pos = pos + 2 + ilen
    end
    t:append_text(string.format(", bundle of %d: %s", count, table.concat(names, " ")))
    return "bundle"
  end
  local layouts, lname = LAYOUT, "native"
  if tname == "medium" or tname == "pull" then
    layouts, lname = layout_of(tname, tvb, at, len - COMMON_HEADER_LEN, type_byte)
  end
  local l = layouts[tname]
  if not l then
    t:add_proto_expert_info(ef.malformed, "unsupported packet type " .. tname)
    return "malformed"
  end
  t:add(pf.layout, tvb(at, 1), lname)
  if len < COMMON_HEADER_LEN + l.body then
    t:add_proto_expert_info(ef.malformed, string.format(
      "frame too short for its header: need %d bytes, have %d", COMMON_HEADER_LEN + l.body, len))
    return "malformed"
  end
  local v = {}
  for _, f in ipairs(l) do
    local r, val = field(tvb, at, f)
    v[f[1]] = val
    t:add(pf[f[1]], r, val)
  end
  local plen = l.payload and v[l.payload] or 0
  local pstart = at + l.body
  if pstart + plen > off + len then
    t:add_proto_expert_info(ef.malformed, string.format(
      "payload truncated: need %d bytes, have %d", pstart + plen - off, len))
    return "malformed"
  end
  t:add(pf.payload_len, plen)
  if plen > 0 then
    if tname == "host_reply" then
      t:add(pf.hostname, tvb(pstart, plen))
    else
      t:add(pf.payload, tvb(pstart, plen))
    end
  end
  local bad = false
  if checksummed then
    local tr = pstart + plen
    if tr + CHECKSUM_LEN > off + len then
      t:add(pf.checksum_status, "bad"):add_proto_expert_info(ef.bad_checksum, "checksum trailer missing")
      bad = true
    else
      -- (bytes() also returns a count: the parentheses keep the ByteArray alone.)
      local want = crc32c({ head, (tvb(base, tr - base):bytes()) })
      local got = tvb(tr, 4):uint()
      t:add(pf.trailer, tvb(tr, 4))
      if want == got then
        t:add(pf.checksum_status, tvb(tr, 4), "good")
      else
        t:add(pf.checksum_status, tvb(tr, 4), "bad"):add_proto_expert_info(ef.bad_checksum,
          string.format("checksum mismatch: trailer 0x%08x, frame 0x%08x", got, want))
        bad = true
      end
    end
  end
  -- Details in omx's words.
  local info = shown
  if v.src_endpoint and v.dst_endpoint then
    info = string.format("%s ep %d>%d", info, v.src_endpoint, v.dst_endpoint)
  end
  if tname == "pull_reply" then
    local ep = bit32.band(bit32.bxor(v.dst_magic, PULL_MAGIC_XOR), 0xFF)
    t:add(pf.pull_endpoint, tvb(at + 12, 4), ep)
    info = string.format("%s ep >%d offset %d len %d", info, ep, v.msg_offset, v.frame_length)
    if STRIPED[bare] then
      -- The puller's session sits above the endpoint byte of a striped magic.
      local session = bit32.rshift(bit32.bxor(v.dst_magic, PULL_MAGIC_XOR), 8)
      info = string.format("%s session 0x%06x", info, session)
    end
  end
  if v.flags and v.flags ~= 0 and (tname == "tiny" or tname == "small" or tname == "rndv"
      or tname == "notify") then
    local names = {}
    for _, o in ipairs(ONESIDED) do
      if bit32.band(v.flags, o[1]) ~= 0 then table.insert(names, o[2]) end
    end
    t:add(pf.onesided, tvb(at + 3, 1), table.concat(names, ","))
    info = info .. " onesided " .. table.concat(names, ",")
  end
  if tname == "connect" then
    info = info .. (v.is_reply == 1 and " reply" or " request")
  end
  if v.match_info then info = info .. string.format(" match 0x%s", v.match_info:tohex()) end
  if SEQUENCED[tname] then info = info .. string.format(" seq %d", v.lib_seqnum) end
  if tname == "truc" then info = info .. string.format(" ack %d", v.lib_seqnum) end
  if tname == "medium" then
    info = info .. string.format(" len %d frag %d", v.length, v.frag_seqnum)
  elseif tname == "tiny" or tname == "small" then
    info = info .. string.format(" len %d", v.length)
  elseif tname == "rndv" then
    info = info .. string.format(" len %d", v.msg_length)
  end
  if tname == "nack_lib" or tname == "nack_mcp" then
    local reason = NACK_TYPES[v.nack_type] or "unknown"
    t:add(pf.nack_reason, tvb(at + 3, 1), reason)
    t:add_proto_expert_info(ef.nack, "nack: " .. reason)
    info = info .. " " .. reason
  end
  -- Sequence analysis, on the first pass only (frames come in order then).
  local key = tostring(pinfo.number) .. ":" .. tostring(off)
  if not pinfo.visited and SEQUENCED[tname] and not bad then
    local stream = string.format("%s>%s:%d>%d", tostring(pinfo.src), tostring(pinfo.dst),
      v.src_endpoint, v.dst_endpoint)
    local seq = bit32.band(v.lib_seqnum, SEQ_MASK)
    local id = string.format("%s#%d/%d/%s", stream, v.lib_seqnum, v.frag_seqnum or 0, tname)
    local verdict
    if seen[id] then
      verdict = "retransmission"
    else
      local top = streams[stream]
      if top then
        local ahead = bit32.band(seq - top, SEQ_MASK)
        if ahead > EARLY_WINDOW and ahead < SEQ_MASK / 2 then verdict = "out_of_window" end
        if ahead >= 1 and ahead < SEQ_MASK / 2 then streams[stream] = seq end
      else
        streams[stream] = seq
      end
    end
    seen[id] = true
    verdicts[key] = verdict
  end
  -- An omx ack toward a peer with the gap-acks extension sets its resent byte (zero
  -- in the original) when it reports a gap in the stream.
  if tname == "truc" and v.resent == 1 then info = info .. " [gap]" end
  local verdict = verdicts[key]
  if verdict == "retransmission" then
    t:add(pf.retransmission, true):add_proto_expert_info(ef.retransmission)
    info = info .. " [retransmission]"
  elseif verdict == "out_of_window" then
    t:add_proto_expert_info(ef.out_of_window)
    info = info .. " [out of window]"
  end
  if latency then info = info .. " [latency]" end
  if checksummed then info = info .. (bad and " [BAD CHECKSUM]" or " [checksum ok]") end
  t:append_text(", " .. info)
  return bad and (shown .. "(bad checksum)") or info
end

local eth_dst, eth_src, eth_type = Field.new("eth.dst"), Field.new("eth.src"), Field.new("eth.type")

function omx.dissector(tvb, pinfo, tree)
  pinfo.cols.protocol = "OMX"
  -- The EtherType table hands over the frame after its Ethernet header.
  local head = ByteArray.new()
  for _, f in ipairs({ eth_dst(), eth_src(), eth_type() }) do
    head:append(f.range:bytes())
  end
  local what = dissect_frame(tvb, pinfo, tree, 0, tvb:len(), head, false)
  pinfo.cols.info = what
  return tvb:len()
end

DissectorTable.get("ethertype"):add(ETHERTYPE, omx)
