"""The student kit: release notebooks, the library as a wheel, pinned requirements, setup.sh and lab.sh (`make
student-kit`).
"""
