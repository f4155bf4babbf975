# Included by the deployment tests (deploy, rejoin, chaos): an empty ${WORK} holding corpus.txt,
# real text for a corpus — the project's own documentation.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
file(GLOB_RECURSE docs ${SRC}/docs/*.md)
set(corpus "")
foreach(f ${SRC}/README.md ${docs})
  file(READ ${f} text)
  string(APPEND corpus "${text}")
endforeach()
file(WRITE ${WORK}/corpus.txt "${corpus}")
