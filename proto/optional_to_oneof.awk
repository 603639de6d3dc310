# Rewrites each proto3 `optional` field into its synthetic oneof, the form
# protoc itself gives such a field in descriptors ("_<name>"):
#
#     optional string cwd = 4;   ->   oneof _cwd { string cwd = 4; }
#
# Debian 12's protoc-c 1.4.1 refuses `optional`; the oneof form carries the
# same field number, type and presence, so the wire format is unchanged.
# Only single-line field declarations are rewritten; anything else that
# starts with `optional` stops the build rather than being passed through.
/^[ \t]*optional[ \t]/ {
  line = $0
  match(line, /^[ \t]*/)
  indent = substr(line, 1, RLENGTH)
  body = substr(line, RLENGTH + 1)
  sub(/^optional[ \t]+/, "", body)
  # body: TYPE NAME = NUMBER [options];  (maybe followed by a comment)
  comment = ""
  c = index(body, "//")
  if (c > 0) {
    comment = " " substr(body, c)
    body = substr(body, 1, c - 1)
  }
  sub(/[ \t]+$/, "", body)
  if (body !~ /^[A-Za-z0-9_.]+[ \t]+[A-Za-z_][A-Za-z0-9_]*[ \t]*=[ \t]*[0-9]+[^;]*;$/) {
    printf("optional_to_oneof: cannot rewrite line %d: %s\n", NR, $0) > "/dev/stderr"
    exit 2
  }
  split(body, parts, /[ \t=]+/)
  name = parts[2]
  print indent "oneof _" name " { " body " }" comment
  next
}
{ print }
