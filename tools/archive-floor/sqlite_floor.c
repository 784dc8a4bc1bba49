// A copy of ../shared/bench/archive-floor/sqlite_floor.c with modes for the archive's fifth
// schema (docs/PERFORMANCE.md, "The lean SQLite schema"):
//   LEAN 2: v5 (message + its key, two entries with entry_message and entry_conversation
//           (stream, conversation, offset, origin, kind), a conversation line per copy, INSERT OR IGNORE)
//   LEAN 3: v5 without the conversation lines (pairs that talked before)
//   LEAN 4: v5 without the conversation lines and without entry_message
// gcc -O2 -o sqlite_floor sqlite_floor.c -lsqlite3
// ./sqlite_floor floor.db N USERS BATCH LEAN [CACHE_KIB [PAGE_SIZE]]
//
// Floor: what a lean archive schema costs per 1:1 message in SQLite (WAL, synchronous=NORMAL),
// batches of B messages per transaction, U users, random sender/recipient. CPU time per message.
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
static double cpu(void){struct rusage r;getrusage(RUSAGE_SELF,&r);return r.ru_utime.tv_sec+r.ru_stime.tv_sec+(r.ru_utime.tv_usec+r.ru_stime.tv_usec)/1e6;}
static void ex(sqlite3*db,const char*s){char*e=0;if(sqlite3_exec(db,s,0,0,&e)){fprintf(stderr,"%s: %s\n",s,e);exit(1);}}
int main(int argc,char**argv){
  const char*path=argv[1]; long N=atol(argv[2]); int U=atoi(argv[3]); int B=atoi(argv[4]); int lean=atoi(argv[5]);
  sqlite3*db; unlink(path); sqlite3_open(path,&db);
  ex(db,"PRAGMA journal_mode=WAL"); ex(db,"PRAGMA synchronous=NORMAL");
  if(argc>6) { char q[64]; snprintf(q,64,"PRAGMA cache_size=-%s",argv[6]); ex(db,q); }
  if(argc>7) { char q[64]; snprintf(q,64,"PRAGMA page_size=%s",argv[7]); ex(db,q); ex(db,"VACUUM"); }
  if(lean>=2){
    ex(db,"CREATE TABLE message(id INTEGER PRIMARY KEY, sender TEXT NOT NULL, message_id TEXT NOT NULL, fingerprint INTEGER, server_time INTEGER, body BLOB)");
    ex(db,"CREATE UNIQUE INDEX message_key ON message(sender, message_id)");
    ex(db,"CREATE TABLE entry(stream TEXT NOT NULL, offset INTEGER NOT NULL, message INTEGER NOT NULL, origin TEXT, conversation TEXT, kind TEXT, PRIMARY KEY(stream,offset)) WITHOUT ROWID");
    if(lean!=4) ex(db,"CREATE INDEX entry_message ON entry(message)");
    ex(db,"CREATE INDEX entry_conversation ON entry(stream, conversation, offset, origin, kind)");
    ex(db,"CREATE TABLE conversation(user TEXT NOT NULL, peer TEXT NOT NULL, read_through INTEGER NOT NULL, PRIMARY KEY(user,peer)) WITHOUT ROWID");
  } else if(lean){
    ex(db,"CREATE TABLE message(conv TEXT NOT NULL, seq INTEGER NOT NULL, sender TEXT NOT NULL, mid TEXT NOT NULL, ts INTEGER, body BLOB, PRIMARY KEY(conv,seq)) WITHOUT ROWID");
    ex(db,"CREATE TABLE entry(stream TEXT NOT NULL, off INTEGER NOT NULL, conv TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY(stream,off)) WITHOUT ROWID");
  } else { // today's shape (approx.)
    ex(db,"CREATE TABLE message(id INTEGER PRIMARY KEY, sender TEXT, message_id TEXT, fingerprint BLOB, server_time INTEGER, body BLOB)");
    ex(db,"CREATE UNIQUE INDEX message_key ON message(sender, message_id)");
    ex(db,"CREATE TABLE entry(stream TEXT NOT NULL, offset INTEGER NOT NULL, message INTEGER, origin TEXT, conversation TEXT, PRIMARY KEY(stream,offset)) WITHOUT ROWID");
    ex(db,"CREATE INDEX entry_message ON entry(message)");
    ex(db,"CREATE INDEX entry_conversation ON entry(stream, conversation, offset)");
    ex(db,"CREATE TABLE conversation(user TEXT, peer TEXT, last_offset INTEGER, last_time INTEGER, read_through INTEGER, unread INTEGER, PRIMARY KEY(user,peer)) WITHOUT ROWID");
    ex(db,"CREATE INDEX conversation_recent ON conversation(user, last_offset)");
  }
  sqlite3_stmt *m,*e,*c=0;
  if(lean>=2){ sqlite3_prepare_v2(db,"INSERT INTO message(id,sender,message_id,fingerprint,server_time,body) VALUES(?,?,?,?,?,?)",-1,&m,0);
         sqlite3_prepare_v2(db,"INSERT INTO entry(stream,offset,message,origin,conversation) VALUES(?,?,?,?,?)",-1,&e,0);
         sqlite3_prepare_v2(db,"INSERT OR IGNORE INTO conversation VALUES(?,?,0)",-1,&c,0);}
  else if(lean){ sqlite3_prepare_v2(db,"INSERT INTO message VALUES(?,?,?,?,?,?)",-1,&m,0); sqlite3_prepare_v2(db,"INSERT INTO entry VALUES(?,?,?,?)",-1,&e,0);}
  else { sqlite3_prepare_v2(db,"INSERT INTO message(id,sender,message_id,fingerprint,server_time,body) VALUES(?,?,?,?,?,?)",-1,&m,0);
         sqlite3_prepare_v2(db,"INSERT INTO entry(stream,offset,message,origin,conversation) VALUES(?,?,?,?,?)",-1,&e,0);
         sqlite3_prepare_v2(db,"INSERT INTO conversation VALUES(?,?,?,?,0,1) ON CONFLICT(user,peer) DO UPDATE SET last_offset=excluded.last_offset,last_time=excluded.last_time,unread=unread+1",-1,&c,0);}
  long *off=calloc(U,sizeof(long)); long *cseq=calloc((size_t)U*64,sizeof(long)); char body[64]; memset(body,'x',64);
  srand(7); double c0=cpu(); struct timespec t0,t1; clock_gettime(CLOCK_MONOTONIC,&t0);
  char s[32],r[32],conv[64],mid[40],st[32];
  for(long i=0;i<N;i+=B){
    ex(db,"BEGIN");
    for(int k=0;k<B&&i+k<N;k++){
      int a=rand()%U, b=rand()%U; if(b==a) b=(b+1)%U;
      snprintf(s,32,"u%d",a); snprintf(r,32,"u%d",b);
      if(a<b) snprintf(conv,64,"u%d|u%d",a,b); else snprintf(conv,64,"u%d|u%d",b,a);
      snprintf(mid,40,"m-%ld",i+k);
      long oa=++off[a], ob=++off[b]; long seq=i+k+1;
      if(lean>=2){
        sqlite3_bind_int64(m,1,seq); sqlite3_bind_text(m,2,s,-1,SQLITE_STATIC); sqlite3_bind_text(m,3,mid,-1,SQLITE_STATIC);
        sqlite3_bind_int64(m,4,seq*7); sqlite3_bind_int64(m,5,seq); sqlite3_bind_blob(m,6,body,64,SQLITE_STATIC);
        sqlite3_step(m); sqlite3_reset(m);
        const char*who[2]={s,r}; const char*peer[2]={r,s}; long offs[2]={oa,ob};
        for(int j=0;j<2;j++){ sqlite3_bind_text(e,1,who[j],-1,SQLITE_STATIC); sqlite3_bind_int64(e,2,offs[j]); sqlite3_bind_int64(e,3,seq); if(j==0) sqlite3_bind_text(e,4,"phone",-1,SQLITE_STATIC); else sqlite3_bind_null(e,4); sqlite3_bind_text(e,5,peer[j],-1,SQLITE_STATIC); sqlite3_step(e); sqlite3_reset(e);
          if(lean==2){sqlite3_bind_text(c,1,who[j],-1,SQLITE_STATIC); sqlite3_bind_text(c,2,peer[j],-1,SQLITE_STATIC); sqlite3_step(c); sqlite3_reset(c);}}
      } else if(lean){
        sqlite3_bind_text(m,1,conv,-1,SQLITE_STATIC); sqlite3_bind_int64(m,2,seq); sqlite3_bind_text(m,3,s,-1,SQLITE_STATIC);
        sqlite3_bind_text(m,4,mid,-1,SQLITE_STATIC); sqlite3_bind_int64(m,5,seq); sqlite3_bind_blob(m,6,body,64,SQLITE_STATIC);
        sqlite3_step(m); sqlite3_reset(m);
        const char*who[2]={s,r}; long offs[2]={oa,ob};
        for(int j=0;j<2;j++){ sqlite3_bind_text(e,1,who[j],-1,SQLITE_STATIC); sqlite3_bind_int64(e,2,offs[j]); sqlite3_bind_text(e,3,conv,-1,SQLITE_STATIC); sqlite3_bind_int64(e,4,seq); sqlite3_step(e); sqlite3_reset(e);}
      } else {
        sqlite3_bind_int64(m,1,seq); sqlite3_bind_text(m,2,s,-1,SQLITE_STATIC); sqlite3_bind_text(m,3,mid,-1,SQLITE_STATIC);
        sqlite3_bind_blob(m,4,body,16,SQLITE_STATIC); sqlite3_bind_int64(m,5,seq); sqlite3_bind_blob(m,6,body,64,SQLITE_STATIC);
        sqlite3_step(m); sqlite3_reset(m);
        const char*who[2]={s,r}; const char*peer[2]={r,s}; long offs[2]={oa,ob};
        for(int j=0;j<2;j++){ sqlite3_bind_text(e,1,who[j],-1,SQLITE_STATIC); sqlite3_bind_int64(e,2,offs[j]); sqlite3_bind_int64(e,3,seq); sqlite3_bind_text(e,4,s,-1,SQLITE_STATIC); sqlite3_bind_text(e,5,peer[j],-1,SQLITE_STATIC); sqlite3_step(e); sqlite3_reset(e);
          sqlite3_bind_text(c,1,who[j],-1,SQLITE_STATIC); sqlite3_bind_text(c,2,peer[j],-1,SQLITE_STATIC); sqlite3_bind_int64(c,3,offs[j]); sqlite3_bind_int64(c,4,seq); sqlite3_step(c); sqlite3_reset(c);}
      }
    }
    ex(db,"COMMIT");
  }
  clock_gettime(CLOCK_MONOTONIC,&t1); double w=(t1.tv_sec-t0.tv_sec)+(t1.tv_nsec-t0.tv_nsec)/1e9, cp=cpu()-c0;
  printf("%s users=%d batch=%d n=%ld: %.0f msg/s wall, %.2f us CPU/msg\n", lean>=2?(lean==2?"v5":lean==3?"v5-no-lines":"v5-no-lines-no-entry_message"):lean?"lean":"today", U, B, N, N/w, cp/N*1e6);
  return 0;
}
