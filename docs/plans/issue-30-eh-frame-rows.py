# Estimates compact unwind rows for an x86-64 ELF (see eh_frame_plan.md): parses `readelf --debug-dump=frames-interp`,
# adds a stop row where FDEs are >15 bytes apart, merges identical consecutive rules. Usage: python3 eh_frame_rows.py BINARY
import re,sys,subprocess
out=subprocess.run(['nice','-n','19','readelf','--debug-dump=frames-interp',sys.argv[1]],capture_output=True,text=True).stdout
fdes=[]; cur=None; cols=None
for line in out.splitlines():
    m=re.search(r' FDE cie=\w+ pc=([0-9a-f]+)\.\.([0-9a-f]+)',line)
    if m:
        cur={'lo':int(m.group(1),16),'hi':int(m.group(2),16),'rows':[]}; fdes.append(cur); cols=None; continue
    if cur is None: continue
    s=line.split()
    if s and s[0]=='LOC': cols=s; continue
    if s and re.fullmatch(r'[0-9a-f]{16}',s[0]) and cols:
        d=dict(zip(cols,s))
        cur['rows'].append((int(s[0],16),d.get('CFA'),d.get('rbp','u'),d.get('ra')))
fdes.sort(key=lambda f:f['lo'])
raw=sum(len(f['rows']) for f in fdes)
table=[]; last_end=None; gaps=0; unsup=0
for f in fdes:
    if last_end is not None and f["lo"]>last_end+15:
        table.append((last_end,'STOP')); gaps+=1
    for (pc,cfa,rbp,ra) in f['rows']:
        if not re.fullmatch(r'(rsp|rbp)\+\d+',cfa or '') or ra!='c-8':
            key='UNSUP:'+str(cfa); unsup+=1
        else:
            key=(cfa, rbp if re.fullmatch(r'c-\d+',rbp) else ('u' if rbp in('u','s') else 'UNSUP'+rbp))
        table.append((pc,key))
    last_end=f['hi']
table.append((last_end,'STOP'))
merged=[]
for pc,k in table:
    if merged and merged[-1][1]==k: continue
    if merged and merged[-1][0]==pc: merged[-1]=(pc,k); continue
    merged.append((pc,k))
# max rows in a 64KiB page / 4KiB page
from collections import Counter
pages=Counter(pc>>16 for pc,_ in merged)
distinct=Counter(k for _,k in merged)
text_lo=fdes[0]['lo']; text_hi=last_end
print(f"FDEs {len(fdes)} raw_rows {raw} with_gap_markers {len(table)} gaps {gaps} unsupported_rows {unsup} merged {len(merged)} distinct_rules {len(distinct)} max_rows_per_64KiB {max(pages.values())} covered {text_hi-text_lo}")
print(distinct.most_common(8))
