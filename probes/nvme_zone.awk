#!/usr/bin/awk -f
# nvme_zone.awk - turn the map dump of probes/nvme_zone.bt into rows of the "# ztbp nvme v1" CSV.
#
# USAGE:
#	awk -f probes/nvme_zone.awk nvme.out | sort -n -t, -k1,1 | cut -d, -f2- > rows.csv
#	Each output line is "<completion ns>,<row>": sort on the first field for completion order, then
#	drop it. The two header lines are not printed (take them from the probe's BEGIN output).
#	Lines other than "@rows[...]: (...)" are ignored. Numbers are copied as text, never computed,
#	so 64-bit values stay exact (awk's numbers are doubles).
#
# INPUT (one bpftrace map entry per line; see probes/nvme_zone.bt):
#	@rows[ts_ns, ctrl, qid, cid]: (done_ns, lat_ns, nsid, opcode, slba, nlb, zsa, status)
# OUTPUT:
#	done_ns,ts_ns,lat_ns,ctrl,qid,cid,nsid,opcode,op,slba,nlb,zone_action,status
BEGIN {
	split("0:flush 1:write 2:read 8:write_zeroes 9:dsm 121:zone_mgmt_send 122:zone_mgmt_recv 125:zone_append", ops, " ")
	for (i in ops) { split(ops[i], kv, ":"); OPNAME[kv[1]] = kv[2] }
	split("1:close 2:finish 3:open 4:reset 5:offline", acts, " ")
	for (i in acts) {
		split(acts[i], kv, ":")
		ACTION[kv[1]] = kv[2]
		ACTION[kv[1] + 256] = kv[2] "_all"
	}
}
/^@rows\[/ {
	line = $0
	gsub(/[][@rows():]/, " ", line)
	gsub(/,/, " ", line)
	n = split(line, f, " ")
	if (n != 12) {
		printf("nvme_zone.awk: line %d: expected 12 numbers, got %d: %s\n", NR, n, $0) > "/dev/stderr"
		bad++
		next
	}
	# f: 1 ts, 2 ctrl, 3 qid, 4 cid, 5 done, 6 lat, 7 nsid, 8 opcode, 9 slba, 10 nlb, 11 zsa, 12 status
	op = (f[8] in OPNAME) ? OPNAME[f[8]] : "other"
	act = (f[8] == 121 && (f[11] in ACTION)) ? ACTION[f[11]] : ""
	print f[5] "," f[1] "," f[6] "," f[2] "," f[3] "," f[4] "," f[7] "," f[8] "," op "," f[9] "," f[10] "," act "," f[12]
}
END { if (bad) exit 1 }
