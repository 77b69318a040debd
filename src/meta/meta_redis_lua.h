/* SPDX-License-Identifier: Apache-2.0 */
/*
 * meta_redis_lua.h — the Lua scripts of the Redis metadata backend (meta_redis.c), one per
 * primitive, each the shared prelude followed by its body. Data model, lease emulation and
 * reply layouts are documented in docs/metadata-redis.md; in short, under the namespace prefix
 * P = "kvm:{NS}:" (passed as KEYS[1]):
 *   P.."rev"      string   the deployment revision (INCR per state change)
 *   P.."k:"..key  hash     v (value), c (create_rev), m (mod_rev), ver (version), l (lease, "0")
 *   P.."keys"     zset     every live key, score 0 (ZRANGEBYLEX = bytewise key order)
 *   P.."lid"      string   lease id counter
 *   P.."l:"..id   hash     ttl (ms), exp (deadline, Redis server time in ms)
 *   P.."lk:"..id  set      keys bound to the lease
 *   P.."ldl"      zset     lease id -> exp (the reaper's index)
 * Every script reads the clock with TIME (Redis 7 replicates effects, so this is allowed) and
 * treats a key bound to an expired lease as absent, dropping that lease and all its keys in the
 * same step (one revision). Replies are arrays whose first element is 0 (ok) or an error code
 * name ("ENOENT") followed by the revision and a message.
 *
 * Invariant: a key's hash exists iff it is a member of P.."keys"; a key with lease l != "0" is a
 * member of P.."lk:"..l.
 */
#ifndef KVMESH_META_META_REDIS_LUA_H
#define KVMESH_META_META_REDIS_LUA_H

/* clang-format off */
#define META_REDIS_LUA_PRELUDE \
    "-- prelude shared by every kvmesh script. KEYS[1] = namespace prefix \"kvm:{NS}:\".\n" \
    "local P = KEYS[1]\n" \
    "local REV = P .. 'rev'\n" \
    "local KSET = P .. 'keys'\n" \
    "local LDL = P .. 'ldl'\n" \
    "local function kk(k) return P .. 'k:' .. k end\n" \
    "local function lk(id) return P .. 'l:' .. id end\n" \
    "local function lsk(id) return P .. 'lk:' .. id end\n" \
    "local T = redis.call('TIME')\n" \
    "local NOW = tonumber(T[1]) * 1000 + math.floor(tonumber(T[2]) / 1000)\n" \
    "-- Like etcd, an empty store is at revision 1; the first change makes it 2.\n" \
    "local function cur_rev() return tonumber(redis.call('GET', REV) or '1') end\n" \
    "-- Lua numbers are doubles: revisions and lease ids are exact up to 2^53-1 only. A change\n" \
    "-- that would go beyond is refused before anything is written (scripts do not roll back,\n" \
    "-- so bump() is always called before the writes it accounts for).\n" \
    "local NUM_MAX = 9007199254740991\n" \
    "local function bump()\n" \
    "  if cur_rev() >= NUM_MAX then\n" \
    "    error({err = 'ERANGE the revision reached 2^53-1, the largest the Lua scripts keep exact'})\n" \
    "  end\n" \
    "  redis.call('SET', REV, 1, 'NX')\n" \
    "  return redis.call('INCR', REV)\n" \
    "end\n" \
    "local function unindex(k)\n" \
    "  redis.call('DEL', kk(k))\n" \
    "  redis.call('ZREM', KSET, k)\n" \
    "end\n" \
    "-- Removes lease id and every key still bound to it in one step; one revision if keys went.\n" \
    "local function lease_drop(id)\n" \
    "  local ms = redis.call('SMEMBERS', lsk(id))\n" \
    "  local gone = {}\n" \
    "  for _, k in ipairs(ms) do\n" \
    "    if redis.call('HGET', kk(k), 'l') == id then gone[#gone + 1] = k end\n" \
    "  end\n" \
    "  local n = #gone\n" \
    "  if n > 0 then bump() end\n" \
    "  for _, k in ipairs(gone) do unindex(k) end\n" \
    "  redis.call('DEL', lk(id), lsk(id))\n" \
    "  redis.call('ZREM', LDL, id)\n" \
    "  return n\n" \
    "end\n" \
    "-- True when lease id exists and has not expired at NOW; an expired lease is dropped on sight.\n" \
    "local function lease_alive(id)\n" \
    "  local exp = redis.call('HGET', lk(id), 'exp')\n" \
    "  if exp and tonumber(exp) > NOW then return true end\n" \
    "  if exp or redis.call('EXISTS', lsk(id)) == 1 then lease_drop(id) end\n" \
    "  return false\n" \
    "end\n" \
    "-- The live record of key k as {v, c, m, ver, l}, or nil; keys of expired leases are absent.\n" \
    "local function read(k)\n" \
    "  local h = redis.call('HMGET', kk(k), 'v', 'c', 'm', 'ver', 'l')\n" \
    "  if not h[2] then return nil end\n" \
    "  if h[5] ~= '0' and not lease_alive(h[5]) then\n" \
    "    if redis.call('EXISTS', kk(k)) == 1 then\n" \
    "      bump()\n" \
    "      unindex(k)\n" \
    "    end\n" \
    "    return nil\n" \
    "  end\n" \
    "  return h\n" \
    "end\n"

static const char meta_redis_lua_get[] = META_REDIS_LUA_PRELUDE
    "local h = read(ARGV[1])\n"
    "if not h then return {0, cur_rev(), 0} end\n"
    "return {0, cur_rev(), 1, h[1], tonumber(h[2]), tonumber(h[3]), tonumber(h[4]), tonumber(h[5])}\n";

static const char meta_redis_lua_range[] = META_REDIS_LUA_PRELUDE
    "-- ARGV: lo, hi (ZRANGEBYLEX bounds), limit. Reply {0, rev, more, n, n x (k, v, c, m, ver, l)}\n"
    "local lo, hi, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])\n"
    "local out = {0, 0, 0, 0}\n"
    "local n, more = 0, 0\n"
    "while more == 0 do\n"
    "  local want = limit + 1 - n\n"
    "  local batch = redis.call('ZRANGEBYLEX', KSET, lo, hi, 'LIMIT', 0, want)\n"
    "  for _, k in ipairs(batch) do\n"
    "    local h = read(k)\n"
    "    if h then\n"
    "      if n == limit then more = 1 break end\n"
    "      n = n + 1\n"
    "      local b = #out\n"
    "      out[b + 1] = k\n"
    "      out[b + 2] = h[1]\n"
    "      out[b + 3] = tonumber(h[2])\n"
    "      out[b + 4] = tonumber(h[3])\n"
    "      out[b + 5] = tonumber(h[4])\n"
    "      out[b + 6] = tonumber(h[5])\n"
    "    end\n"
    "  end\n"
    "  if #batch < want then break end\n"
    "  lo = '(' .. batch[#batch]\n"
    "end\n"
    "out[2] = cur_rev()\n"
    "out[3] = more\n"
    "out[4] = n\n"
    "return out\n";

static const char meta_redis_lua_txn[] = META_REDIS_LUA_PRELUDE
    "-- ARGV: ncmp, nthen, nelse, ncmp x (key, target, op, num, value), (nthen+nelse) x (type, key,\n"
    "-- value, lease). target: e(xists) v(alue) n (version) m(od_rev) c(reate_rev) l(ease);\n"
    "-- op: = ! < >; type: p(ut) d(el) g(et).\n"
    "-- Reply {0, rev, succeeded, n_deleted, nops, nops x (found, v, c, m, ver, l)} or {'ENOENT', rev, msg}\n"
    "local ncmp, nthen, nelse = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])\n"
    "local function bytecmp(a, b)\n"
    "  local n = math.min(#a, #b)\n"
    "  for i = 1, n do\n"
    "    local x, y = string.byte(a, i), string.byte(b, i)\n"
    "    if x ~= y then return x < y and -1 or 1 end\n"
    "  end\n"
    "  if #a == #b then return 0 end\n"
    "  return #a < #b and -1 or 1\n"
    "end\n"
    "local function numcmp(x, op, y)\n"
    "  if op == '=' then return x == y elseif op == '!' then return x ~= y\n"
    "  elseif op == '<' then return x < y else return x > y end\n"
    "end\n"
    "local ok = true\n"
    "local i = 4\n"
    "for _ = 1, ncmp do\n"
    "  local k, tgt, op, num, val = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]), ARGV[i + 4]\n"
    "  i = i + 5\n"
    "  local h = read(k)\n"
    "  local res\n"
    "  if tgt == 'v' then\n"
    "    if not h then res = false\n"
    "    elseif op == '=' then res = (h[1] == val)\n"
    "    elseif op == '!' then res = (h[1] ~= val)\n"
    "    else res = numcmp(bytecmp(h[1], val), op, 0) end\n"
    "  else\n"
    "    local x = 0\n"
    "    if tgt == 'e' then x = h and 1 or 0\n"
    "    elseif h then\n"
    "      if tgt == 'n' then x = tonumber(h[4])\n"
    "      elseif tgt == 'm' then x = tonumber(h[3])\n"
    "      elseif tgt == 'c' then x = tonumber(h[2])\n"
    "      else x = tonumber(h[5]) end\n"
    "    end\n"
    "    res = numcmp(x, op, num)\n"
    "  end\n"
    "  if not res then ok = false end\n"
    "end\n"
    "local first, count = i, nthen\n"
    "if not ok then first, count = i + 4 * nthen, nelse end\n"
    "-- Before any write: expire what the branch touches, and check every lease it binds.\n"
    "for j = 0, count - 1 do\n"
    "  local b = first + 4 * j\n"
    "  read(ARGV[b + 1])\n"
    "  if ARGV[b] == 'p' and ARGV[b + 3] ~= '0' and not lease_alive(ARGV[b + 3]) then\n"
    "    return {'ENOENT', cur_rev(), 'lease ' .. ARGV[b + 3] .. ' not found or expired'}\n"
    "  end\n"
    "end\n"
    "local out = {0, 0, ok and 1 or 0, 0, count}\n"
    "local wrev = nil\n"
    "local ndel = 0\n"
    "for j = 0, count - 1 do\n"
    "  local b = first + 4 * j\n"
    "  local t, k = ARGV[b], ARGV[b + 1]\n"
    "  local o = #out\n"
    "  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 0, '', 0, 0, 0, 0\n"
    "  if t == 'g' then\n"
    "    local h = read(k)\n"
    "    if h then\n"
    "      out[o + 1], out[o + 2] = 1, h[1]\n"
    "      out[o + 3], out[o + 4], out[o + 5], out[o + 6] = tonumber(h[2]), tonumber(h[3]), tonumber(h[4]), tonumber(h[5])\n"
    "    end\n"
    "  else\n"
    "    local key = kk(k)\n"
    "    local h = redis.call('HMGET', key, 'c', 'ver', 'l')\n"
    "    if t == 'p' then\n"
    "      if not wrev then wrev = bump() end\n"
    "      local v, l = ARGV[b + 2], ARGV[b + 3]\n"
    "      if h[1] then\n"
    "        if h[3] ~= '0' and h[3] ~= l then redis.call('SREM', lsk(h[3]), k) end\n"
    "        redis.call('HSET', key, 'v', v, 'm', wrev, 'ver', tonumber(h[2]) + 1, 'l', l)\n"
    "      else\n"
    "        redis.call('HSET', key, 'v', v, 'c', wrev, 'm', wrev, 'ver', 1, 'l', l)\n"
    "        redis.call('ZADD', KSET, 0, k)\n"
    "      end\n"
    "      if l ~= '0' then redis.call('SADD', lsk(l), k) end\n"
    "    elseif h[1] then\n"
    "      if not wrev then wrev = bump() end\n"
    "      if h[3] ~= '0' then redis.call('SREM', lsk(h[3]), k) end\n"
    "      unindex(k)\n"
    "      ndel = ndel + 1\n"
    "    end\n"
    "  end\n"
    "end\n"
    "out[2] = cur_rev()\n"
    "out[4] = ndel\n"
    "return out\n";

static const char meta_redis_lua_grant[] = META_REDIS_LUA_PRELUDE
    "-- ARGV: ttl_ms. Reply {0, rev, id, ttl_ms}\n"
    "local ttl = tonumber(ARGV[1])\n"
    "if tonumber(redis.call('GET', P .. 'lid') or '0') >= NUM_MAX then\n"
    "  return redis.error_reply('ERANGE lease ids reached 2^53-1, the largest the Lua scripts keep exact')\n"
    "end\n"
    "local id = redis.call('INCR', P .. 'lid')\n"
    "-- the id as the decimal string every other script gets in ARGV (tostring would give 1e+14)\n"
    "local sid = string.format('%d', id)\n"
    "local exp = NOW + ttl\n"
    "redis.call('HSET', lk(sid), 'ttl', ttl, 'exp', exp)\n"
    "redis.call('ZADD', LDL, exp, sid)\n"
    "return {0, cur_rev(), id, ttl}\n";

static const char meta_redis_lua_keepalive[] = META_REDIS_LUA_PRELUDE
    "-- ARGV: id. Reply {0, rev, id, ttl_ms} or {'ENOENT', rev, msg}\n"
    "local id = ARGV[1]\n"
    "if not lease_alive(id) then return {'ENOENT', cur_rev(), 'lease ' .. id .. ' not found or expired'} end\n"
    "local ttl = tonumber(redis.call('HGET', lk(id), 'ttl'))\n"
    "local exp = NOW + ttl\n"
    "redis.call('HSET', lk(id), 'exp', exp)\n"
    "redis.call('ZADD', LDL, exp, id)\n"
    "return {0, cur_rev(), tonumber(id), ttl}\n";

static const char meta_redis_lua_revoke[] = META_REDIS_LUA_PRELUDE
    "-- ARGV: id. Reply {0, rev} or {'ENOENT', rev, msg}\n"
    "local id = ARGV[1]\n"
    "if not lease_alive(id) then return {'ENOENT', cur_rev(), 'lease ' .. id .. ' not found or expired'} end\n"
    "lease_drop(id)\n"
    "return {0, cur_rev()}\n";

static const char meta_redis_lua_ttl[] = META_REDIS_LUA_PRELUDE
    "-- ARGV: id. Reply {0, rev, id, remaining_ms} or {'ENOENT', rev, msg}\n"
    "local id = ARGV[1]\n"
    "if not lease_alive(id) then return {'ENOENT', cur_rev(), 'lease ' .. id .. ' not found or expired'} end\n"
    "local exp = tonumber(redis.call('HGET', lk(id), 'exp'))\n"
    "return {0, cur_rev(), tonumber(id), exp - NOW}\n";

static const char meta_redis_lua_reap[] = META_REDIS_LUA_PRELUDE
    "-- ARGV: max. Expires at most max due leases. Reply {0, rev, n_expired, more_due}\n"
    "local max = tonumber(ARGV[1])\n"
    "local ids = redis.call('ZRANGEBYSCORE', LDL, '-inf', NOW, 'LIMIT', 0, max)\n"
    "for _, id in ipairs(ids) do lease_drop(id) end\n"
    "local more = 0\n"
    "if #ids == max and redis.call('ZCOUNT', LDL, '-inf', NOW) > 0 then more = 1 end\n"
    "return {0, cur_rev(), #ids, more}\n";

/* clang-format on */

#endif
