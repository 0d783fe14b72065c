# SPDX-License-Identifier: Apache-2.0
# The integration files of the source tree (spoe-conf/, haproxy-examples/,
# examples/, dashboards/, alerts/) name each other by paths relative to
# the tree's root, which HAProxy would open relative to the directory it
# starts in. `make install` copies them under @DOCDIR@ through this
# script, which names every such path as an installed system has it:
#
#   spoe-conf/ratelimit-X.conf       @HAPROXYDIR@/spoe-ratelimit-X.conf
#   haproxy-examples/X.map           @HAPROXYDIR@/X.map
#   haproxy-examples/X.cfg           @DOCDIR@/examples/haproxy/X.cfg
#   examples/, docs/, dashboards/, alerts/   under @DOCDIR@
#   build/spoa-ratelimit             @SBINDIR@/spoa-ratelimit
#
# (the SPOE files and the maps are shipped in @DOCDIR@/examples/haproxy/
# under the names they take in @HAPROXYDIR@). A path is a source path only
# at the start of a line, after a character that cannot be part of a path,
# or as the default of an environment variable ("${RL_SPOE_CONF-...}"),
# never inside a path already absolute.
s#\(^\|[^-a-zA-Z0-9_./]\|{RL_[A-Z_]*-\)spoe-conf/ratelimit\([-a-z]*\)\.conf#\1@HAPROXYDIR@/spoe-ratelimit\2.conf#g
s#\(^\|[^-a-zA-Z0-9_./]\|{RL_[A-Z_]*-\)spoe-conf/#\1@DOCDIR@/examples/haproxy/#g
s#\(^\|[^-a-zA-Z0-9_./]\|{RL_[A-Z_]*-\)haproxy-examples/\([-a-z]*\.map\)#\1@HAPROXYDIR@/\2#g
s#\(^\|[^-a-zA-Z0-9_./]\|{RL_[A-Z_]*-\)haproxy-examples/#\1@DOCDIR@/examples/haproxy/#g
s#\(^\|[^-a-zA-Z0-9_./]\|{RL_[A-Z_]*-\)\(examples\|docs\|dashboards\|alerts\)/#\1@DOCDIR@/\2/#g
s#\(^\|[^-a-zA-Z0-9_./]\)build/spoa-ratelimit#\1@SBINDIR@/spoa-ratelimit#g
# A SPOE file named by its bare name, as its neighbours in spoe-conf/ do.
s#\(^\|[^-a-zA-Z0-9_./]\)\(ratelimit\(-[a-z]*\)\?\.conf\)#\1spoe-\2#g
s#from the repository root#from any directory#g
