import json, collections, sys, statistics
rs=[json.loads(l) for l in open(sys.argv[1])]
c=collections.Counter(); slim_s=[]
for r in rs:
    if 'capture' in r:
        e=r['capture'][1]
        c['capture: '+('no call at top level or in the constructor' if 'top level' in e else 'syntax error' if 'SyntaxError' in e else e[:60])]+=1; continue
    for e in r['calls']:
        if e.get('needs_python'): c['own PYBIND11_MODULE: torch headers from the start']+=1
        elif e['slim_ok']: c['slim compiles']+=1; slim_s.append(e['slim_s'])
        else:
            c['slim fails: too_slim=%s, full compiles=%s'%(e['too_slim'],e.get('full_ok'))]+=1
            print(r['task'], e['name'], e['first_error'][:160], '| full:', e.get('full_ok'), e.get('full_first_error','')[:120])
for k,v in c.most_common(): print(v, k)
if slim_s: print('slim s (2 jobs at once): median', statistics.median(slim_s), 'range', min(slim_s), max(slim_s), len(slim_s))
